// harness/cli_text.h.
#include "harness/cli_text.h"

#include <cstdarg>
#include <cstdio>

#include <CLI/CLI.hpp>

namespace dtb::cli {

std::string fmt(const char* f, ...) {
  va_list ap, again;
  va_start(ap, f);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, f, ap);
  va_end(ap);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, f, again);
  va_end(again);
  return out;
}

bool given(const CLI::App& sub, const char* opt) { return sub.count(opt) > 0; }

}  // namespace dtb::cli
