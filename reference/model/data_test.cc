// Byte-level data: the global batch is a pure function of (data, seed, step), and a slice
// of it (a DP rank's, a micro-batch's) is exactly those sequences of the whole.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "kernels/error.h"
#include "reference/model/data.h"

namespace dtb {

// A file of this test's own (ctest runs tests in parallel, and other checkouts may too).
static std::string write_temp(const std::string& text) {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = testing::TempDir() + "dtb_data_test." + info->name() + "." +
                           std::to_string(getpid()) + ".txt";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(Data, LoadsBytesAndSha256) {
  const Dataset d = load_dataset(write_temp("abc"), 2);
  EXPECT_EQ(d.bytes.size(), 3u);
  // FIPS 180-2 test vector for "abc".
  EXPECT_EQ(d.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Data, MissingOrShortFileIsInputError) {
  EXPECT_THROW(load_dataset("/nonexistent/dtbench.txt", 2), InputError);
  EXPECT_THROW(load_dataset(write_temp("abc"), 10), InputError);
}

TEST(Data, SlicesOfTheGlobalBatchAgree) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + (i * 7) % 26);
  const Dataset d = load_dataset(write_temp(text), 2);
  const int B = 8, Tn = 16;
  std::vector<int32_t> all(B * Tn), all_t(B * Tn), part(2 * Tn), part_t(2 * Tn);
  fill_batch(d, 5, 3, B, 0, B, Tn, all.data(), all_t.data());
  for (int first = 0; first < B; first += 2) {
    fill_batch(d, 5, 3, B, first, 2, Tn, part.data(), part_t.data());
    for (int i = 0; i < 2 * Tn; ++i) {
      EXPECT_EQ(part[i], all[first * Tn + i]);
      EXPECT_EQ(part_t[i], all_t[first * Tn + i]);
    }
  }
  for (int s = 0; s < B; ++s)
    for (int t = 0; t + 1 < Tn; ++t) EXPECT_EQ(all_t[s * Tn + t], all[s * Tn + t + 1]);
  std::vector<int32_t> other(B * Tn), other_t(B * Tn);
  fill_batch(d, 5, 4, B, 0, B, Tn, other.data(), other_t.data());
  EXPECT_NE(other, all);  // another step, another batch
}

}  // namespace dtb
