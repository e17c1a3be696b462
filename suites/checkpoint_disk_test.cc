// The checkpoint suite's filesystem side fails alike on every rank (suites/checkpoint_disk.h):
// a damaged rank file or a failed disk probe on one rank is every rank's AgreedInputError, which
// the harness records as the suite's error (exit 2, the report kept) — not a local InputError that
// ended the job through MPI_Abort while the other ranks went on. Runs at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/agreed_error.h"
#include "reference/parallel/parallel_test_util.h"
#include "suites/checkpoint_disk.h"

namespace dtb {
namespace {

namespace fs = std::filesystem;

// Runs f on every rank; returns the AgreedInputError's message ("" when none was thrown). Another
// exception (a local InputError: the fault) is a test failure, returned as "other: <what>".
template <typename F>
std::string agreed_error_of(F&& f) {
  try {
    f();
  } catch (const AgreedInputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not agreed: " << e.what();
    return std::string("other: ") + e.what();
  }
  return "";
}

TEST(CheckpointDisk, DamagedRankFileIsAgreed) {
  auto w = make_mpi_world();
  const int n = w->size(), last = n - 1;
  SharedTempDir dir(*w);
  const std::string file = dir.sub("rank-" + std::to_string(w->rank()) + ".bin");
  const RankFileId id{w->rank(), n, 2};
  write_rank_file(file, id,
                  {{"state", "raw", std::vector<char>(48, 1)}, {"index.params", "raw", std::vector<char>(24, 2)}});
  // Undamaged: every rank its own index bytes (48 a table entry + 24), no error.
  EXPECT_EQ(agreed_error_of([&] { EXPECT_EQ(rank_file_index_bytes(file, id, *w), 72u); }), "");
  if (w->rank() == last) {  // one flipped payload byte in the last rank's file
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-10, std::ios::end);
    char b = 0;
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(-10, std::ios::end);
    f.write(&b, 1);
  }
  w->barrier();
  const std::string why = agreed_error_of([&] { rank_file_index_bytes(file, id, *w); });
  const std::string want = "checkpoint file " + dir.sub("rank-" + std::to_string(last) + ".bin") + ": checksum mismatch";
  EXPECT_EQ(why.rfind(want, 0), 0u) << why;  // the same line on every rank, naming the last rank's file
}

TEST(CheckpointDisk, FailedProbeIsAgreed) {
  auto w = make_mpi_world();
  SharedTempDir dir(*w);
  // Rank 1's probe into a directory that does not exist: its open fails.
  const std::string path = w->rank() == 1 ? dir.sub("missing/disk-1.tmp") : dir.sub("disk-" + std::to_string(w->rank()));
  const std::string why = agreed_error_of([&] { measure_disk(path, 4096, *w); });
  EXPECT_EQ(why.rfind("checkpoint: disk probe " + dir.sub("missing/disk-1.tmp") + ": open: ", 0), 0u) << why;
}

}  // namespace
}  // namespace dtb
