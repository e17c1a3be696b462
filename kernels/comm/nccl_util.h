// What the two files of NcclCommunicator (nccl_communicator.cc: the operations;
// nccl_communicator_init.cc: creating communicators) share: the clock and the pause between
// polls, NCCL's error and async state as text, and the wording of a timeout. Private to
// kernels/comm: no other file includes it.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace dtb::nccl_util {

using Clock = std::chrono::steady_clock;

/// "group 'world' (rank 1 of 4)", for error messages.
inline std::string describe(const std::string& name, int rank, int size) {
  return "group '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) +
         ")";
}

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::string fmt(const char* format, double x) {
  char text[64];
  std::snprintf(text, sizeof text, format, x);
  return text;
}

/// Between two polls: yield for the first millisecond of a wait, so that short operations
/// are not delayed by a sleep, then sleep ~100 us.
inline void pause(Clock::time_point t0) {
  if (Clock::now() - t0 < std::chrono::milliseconds(1)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

/// cudaEventQuery's cudaErrorNotReady is also recorded as the thread's last error; clear it
/// (and only it) so that a later DTB_CUDA_CHECK(cudaGetLastError()) does not trip on it.
inline void clear_not_ready() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
}

inline std::string one_line(const char* s) {
  std::string out = s != nullptr ? s : "";
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

/// "unhandled system error (code 2): <NCCL's last error message>". Call before aborting.
inline std::string nccl_error(ncclResult_t rc, ncclComm_t comm) {
  std::string s = std::string(ncclGetErrorString(rc)) + " (code " + std::to_string(int(rc)) + ")";
  const std::string last = one_line(ncclGetLastError(comm));
  if (!last.empty()) s += ": " + last;
  return s;
}

inline std::string timeout_text(double timeout_s, double waited_s) {
  return "did not complete within " + fmt("%g", timeout_s) + " s (waited " +
         fmt("%.1f", waited_s) + " s): a rank did not arrive or the network hung";
}

/// The async state of `comm`: ncclSuccess, ncclInProgress or an error (a failed query is
/// reported as its own error).
inline ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
  return rc != ncclSuccess ? rc : state;
}

}  // namespace dtb::nccl_util
