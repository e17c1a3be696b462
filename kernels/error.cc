// The error sink: one line naming rank, host, file and line, the report written with the
// running suite marked, then the whole job ends.
#include "kernels/error.h"

#include "kernels/comm/watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace dtb {

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
  run_termination_hook(what);  // the report, with the running suite marked (watchdog.h)
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
