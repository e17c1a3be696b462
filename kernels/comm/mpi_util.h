// Internal to the MPI communicator's files (mpi_communicator.cc, mpi_half_ops.cc): the MPI
// return-code check and the half types' reduction operations.
#pragma once
#include <mpi.h>

#include <cstdio>
#include <string>

#include "kernels/comm/communicator.h"
#include "kernels/error.h"

namespace dtb {

/// "<call> failed on <group>: <MPI error string> (code rc)".
inline std::string mpi_failure(const std::string& call, const std::string& group, int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "?");
  return call + " failed on " + group + ": " + text + " (code " + std::to_string(rc) + ")";
}

/// Aborts the job when an MPI call does not return MPI_SUCCESS, naming call and group.
#define DTB_MPI_CHECK(expr, call, group)                                    \
  do {                                                                      \
    const int dtb_mpi_rc_ = (expr);                                         \
    DTB_CHECK(dtb_mpi_rc_ == MPI_SUCCESS, mpi_failure(call, group, dtb_mpi_rc_)); \
  } while (0)

/// The user-defined MPI operation reducing half type `t` (bf16 or f16) with `op` on
/// MPI_UINT16_T words (mpi_half_ops.cc says how it rounds), created on first use (once per
/// process, thread-safe) and freed in MPI_Finalize. Errors: a failed MPI call, or a call
/// after MPI_Finalize freed the operations, aborts naming `call` and `group`.
MPI_Op half_op(DType t, ReduceOp op, const char* call, const std::string& group);

}  // namespace dtb
