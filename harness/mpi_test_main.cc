// main() for the multi-rank GoogleTest binary: MPI initialised around the tests, the full
// output printed by rank 0 only, every other rank printing just its failed assertions
// (prefixed with its rank), and a test that fails on any rank fails on all (the exit
// status is the max over ranks), so ctest sees the failure wherever it happened.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  // The test's name is kept here: asking UnitTest for the current test from inside
  // OnTestPartResult would take a lock GoogleTest already holds there (a deadlock).
  void OnTestStart(const ::testing::TestInfo& t) override {
    name_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, name_.c_str(), r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
  std::string name_ = "?";
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
