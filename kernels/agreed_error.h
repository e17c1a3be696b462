// Bad input that every rank of a job found alike (kernels/error.h's third path, InputError,
// made collective): a checkpoint every rank read and refused together (reference/checkpoint/checkpoint.cc
// agrees on the lowest failing rank's message before anyone throws). No rank is left waiting
// in a collective, so the job need not end: the harness records the suite's error in the
// report, runs on, and exits with status 2 (kExitInput) like any other refusal.
#pragma once
#include <string>

#include "kernels/comm/communicator.h"
#include "kernels/error.h"

namespace dtb {

/// An InputError thrown on every rank of the job with the same message. Throw it only where
/// that holds (after an agreement, or from a check every rank evaluates on the same data);
/// thrown on one rank alone it would leave the others waiting.
struct AgreedInputError : InputError {
  using InputError::InputError;
};

/// The agreement that makes it so: every rank of `comm` passes the error it found ("" when
/// none, e.g. the what() of an InputError it caught); when any rank found one, every rank
/// throws AgreedInputError with the lowest failing rank's message (its first 4096 bytes), so
/// that none waits in a collective the others left. Collective over `comm`: one all-reduce of
/// an int when no rank failed, then an all-reduce and two broadcasts.
void agree_on_error(Communicator& comm, const std::string& why);

}  // namespace dtb
