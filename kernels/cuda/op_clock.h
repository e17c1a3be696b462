// The CUDA OpClock (kernels/op_profile.h): CUDA events on a stream around each op call.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "kernels/op_profile.h"

namespace dtb {

/// An OpClock that records a CUDA event on `stream` at begin() and at end(), so a family's
/// seconds are the device time of the work queued on that stream in between
/// (cudaEventElapsedTime, resolution about 0.5 us); seconds() waits for the last event.
/// The events come from a pool that seconds() and reset() recycle, so call seconds() once
/// a step to keep the pool small. Work the op queued on other streams is not counted.
/// Errors: a failed CUDA call aborts through the error sink.
std::unique_ptr<OpClock> make_cuda_op_clock(cudaStream_t stream);

}  // namespace dtb
