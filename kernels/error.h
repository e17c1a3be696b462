// The one error sink every layer uses, and the error type for bad user input.
// Three kinds of failure, three paths: a broken invariant or a failed
// library call aborts the job with one line (DTB_CHECK / fatal); bad user input throws
// InputError, which the harness turns into one line and exit status 2; a failed check is
// data in the report, not an error.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

namespace dtb {

/// Bad user input: a malformed config, an unknown option, a missing file, a layout that
/// does not divide. The harness prints `dtbench: error: <what>` and exits with status 2.
/// `s` cut to max_len characters with non-printable ones replaced by '?', for one-line
/// error messages that quote user input.
std::string printable(const std::string& s, size_t max_len = 200);

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Prints `dtbench: rank R host file:line: what` to stderr, runs the termination hook
/// (below: the harness writes the report with the running suite marked) and ends the job:
/// with MPI_Abort when MPI is initialised (so no other rank hangs), else std::abort.
[[noreturn]] void fatal(const char* file, int line, const std::string& what);

/// What runs before the process ends abnormally, with the one-line reason: fatal() above,
/// and the communication watchdog (kernels/comm/watchdog.h) on a timeout ("MPI_Allreduce on
/// group 'dp0' ... did not complete within 5 s ...") or a signal ("ended by SIGTERM"), in its
/// own thread. It must not call MPI. Empty: none. Thread-safe.
void set_termination_hook(std::function<void(const std::string& why)> hook);

/// Runs the termination hook with `why`, at most once per process (later calls do nothing).
/// Returns true when a hook was set and returned normally; one that throws is reported on
/// stderr as `dtbench: error: while ending the run: <what>` and counts as not run.
bool run_termination_hook(const std::string& why);

}  // namespace dtb

/// Aborts the job with one line when `cond` is false. `msg` is any expression convertible
/// to std::string; it is evaluated only on failure.
#define DTB_CHECK(cond, msg)                                       \
  do {                                                             \
    if (!(cond)) ::dtb::fatal(__FILE__, __LINE__, std::string(msg)); \
  } while (0)
