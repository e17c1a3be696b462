// The CUDA OpClock (kernels/op_profile.h): CUDA events on a stream around each op call.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "kernels/op_profile.h"

namespace dtb {

/// An OpClock that records a CUDA event on `stream` at begin() and at end(), so a family's
/// seconds are the device time of the work queued on that stream in between
/// (cudaEventElapsedTime, resolution about 0.5 us), idle gaps on the stream between them
/// included (launch latency when the stream is not backed up, and host work inside an op);
/// seconds() waits for the last event. Pairs are folded into the totals as they complete
/// (checked only when no free event is left), so the pool holds about the events of the work
/// in flight. Work the op queued on other streams is not counted. Each op costs two
/// cudaEventRecord calls on the host (about a microsecond each).
/// Errors: a failed CUDA call aborts through the error sink.
std::unique_ptr<OpClock> make_cuda_op_clock(cudaStream_t stream);

}  // namespace dtb
