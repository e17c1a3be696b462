// `dtbench plan --calibrate FILE` (harness/plan_cli.h): this machine's rates measured over the
// world's ranks and written as a hardware file, for plans of the machine at hand.
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include "harness/hardware_file.h"
#include "harness/plan_cli.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "suites/step_time_calibration.h"

namespace dtb {

HardwareSpec calibrate_hardware(Communicator& world) {
  const int n = world.size();
  if (n < 2)
    throw InputError("plan --calibrate: needs 2 or more ranks (mpirun -np N dtbench plan --calibrate FILE) to fit the "
                     "collectives");
  std::unique_ptr<Backend> be = make_cpu_backend();
  // The shapes timed: one layer of C 256 (4 heads, V 1024) over 128 tokens, pure DP over the
  // world, so that every rank times the same ops at once; the rates fitted to them price any shape.
  StepTimeInput in;
  in.model = GptConfig{.L = 1, .C = 256, .NH = 4, .T = 128, .V = 1024};
  in.seq_len = 128, in.global_batch = n, in.micro_batches = 1;
  in.layout.dp = n;
  HardwareSpec s;
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    in.precision = p;
    StepTimeCalibrationSpec spec;
    spec.ops = step_ops(in);
    spec.precision = p;
    const StepTimeHardware hw = calibrate_step_time(world, be->device(), precision_ops(be.get()), spec);
    const size_t i = size_t(p);
    if (p == Precision::fp32) s.hw = hw;  // the communication and host fits: once
    s.hw.gemm[i] = hw.gemm[i];
    s.hw.attention[i] = hw.attention[i];
    // No published peak for a CPU: one rank's GEMM rate alone on a core (the shared rate times
    // the ranks per core), so that MFU reads as a fraction of what sgemm reaches here.
    s.peak_flops[i] = std::max(hw.gemm[i].per_s, hw.attention[i].per_s) * hw.ranks_per_core;
  }
  s.hw.op_seconds.clear();
  s.hw.ranks_per_node = n;  // one machine
  s.hw.p2p_inter = s.hw.p2p_intra;
  auto positive = [](const char* what, double rate) {
    if (!(rate > 0))
      throw std::runtime_error(std::string("plan --calibrate: the ") + what +
                               " fit found no bandwidth in 4 rounds of timing (times that do not grow with size: a machine too busy?)");
  };
  positive("memory-bound ops'", s.hw.memory.per_s);
  positive("send/receive", s.hw.p2p_intra.per_s);
  positive("host copy", s.hw.host_link.per_s);
  for (const CollectiveFit& f : s.hw.collectives) positive("all-reduce", f.bus.per_s);
  for (size_t i = 0; i < 3; ++i) positive("GEMM", s.hw.gemm[i].per_s), positive("attention", s.hw.attention[i].per_s);
  s.device_memory_bytes = double(host_memory_bytes()) / n;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  s.name = "calibrated-" + std::string(host);
  s.description = "this machine (" + std::string(host) + ") measured by dtbench plan --calibrate over " +
                  std::to_string(n) + " ranks on the CPU backend, " + date;
  const std::string how = "measured on " + std::string(host) + ", " + date + ", dtbench plan --calibrate over " +
                          std::to_string(n) + " ranks (suites/step_time_calibration.h)";
  for (const char* k : {"gemm", "attention", "memory", "collectives", "p2p_intra", "host_link", "ranks_per_core",
                        "host_pass"})
    s.sources[k] = how;
  s.sources["peak_tflops"] = "no published peak: one rank's measured GEMM rate alone on a core (" + how + ")";
  s.sources["device_memory_gib"] = "the machine's physical memory over its " + std::to_string(n) + " ranks";
  s.sources["ranks_per_node"] = "one machine: every rank";
  s.sources["p2p_inter"] = "one machine, no inter-node link measured: the intra-node send/receive";
  return s;
}

}  // namespace dtb
