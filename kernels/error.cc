// The error sink: one line naming rank, host, file and line, the report written with the
// running suite marked, then the whole job ends.
#include "kernels/error.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

namespace dtb {

namespace {

struct HookState {
  std::mutex mu;  // guards hook: set on the main thread, run by the watchdog thread too
  std::function<void(const std::string&)> hook;
  std::atomic<bool> ran{false};
};

HookState& hook_state() {
  static HookState s;
  return s;
}

}  // namespace

void set_termination_hook(std::function<void(const std::string&)> hook) {
  HookState& st = hook_state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.hook = std::move(hook);
}

bool run_termination_hook(const std::string& why) {
  HookState& st = hook_state();
  if (st.ran.exchange(true)) return false;
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    hook = st.hook;
  }
  if (!hook) return false;
  try {
    hook(why);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtbench: error: while ending the run: %s\n", e.what());
    return false;
  }
}

[[noreturn]] void fatal(const char* file, int line, const std::string& what) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = 0;
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "dtbench: rank %d %s %s:%d: %s\n", rank, host, file, line, what.c_str());
  std::fflush(stderr);
  (void)run_termination_hook(what);  // the report, with the running suite marked
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

std::string printable(const std::string& s, size_t max_len) {
  std::string out;
  for (char c : s.substr(0, max_len)) out += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > max_len) out += "...";
  return out;
}

}  // namespace dtb
