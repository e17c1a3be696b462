// The tests' training text: real English, byte-level, the same on every rank, built in
// memory (no file), 40 copies of one sentence pair (4,400 bytes).
#pragma once
#include <string>

#include "reference/model/data.h"

namespace dtb {

/// The inline dataset the trainer tests share (path "inline").
inline Dataset test_data() {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "It was the best of times, it was the worst of times, it was the age of wisdom, "
            "it was the age of foolishness. ";
  Dataset d;
  d.path = "inline";
  d.bytes.assign(text.begin(), text.end());
  return d;
}

}  // namespace dtb
