// `dtbench plan`: every layout of a dense GPT on N GPUs of a named system (reference/analytic/planner.h
// on a hardware file, harness/hardware_file.h), the feasible ones ranked by predicted step time
// with memory per GPU, tokens/s, MFU and the main terms, and the rest grouped by why they were
// rejected; JSON with --json. Nothing runs: the memory and the step are models (docs/plan.md).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "harness/hardware_file.h"
#include "kernels/comm/communicator.h"

namespace CLI {
class App;  // <CLI/CLI.hpp> only in the files that build or read the options (why: harness/cli_text.h)
}

namespace dtb {

/// The options of `dtbench plan`, as given (sentinels: 0, -1 or empty = not given).
struct PlanArgs {
  std::string model;
  int layers = 0, hidden = 0, heads = 0, vocab = 0, seq = 0;
  int gpus = 0;
  std::string hardware;
  int global_batch = 0, micro_batch_size = 1;
  std::string precision = "bf16";
  std::string attention;  // --attention materialized | fused (empty: the hardware file's attention_kernel)
  int tp = 0, pp = 0, dp = 0, cp = 0, zero_stage = -1;
  int top = 10;
  bool json = false;
  std::string calibrate;  // --calibrate FILE: measure this machine and write its hardware file
  std::string validate;   // --validate FILE: the model against a published set (harness/plan_validate.h)
  std::string schedules = "all";  // --schedules all | 1f1b
  std::string stack = "dtbench";  // --stack NAME: a stack profile's overlap (reference/analytic/stack_profile.h)
};

/// Adds the `plan` subcommand with its options bound to `args` (which must outlive `app`).
CLI::App* add_plan_subcommand(CLI::App& app, PlanArgs& args);

/// The plan as JSON (the document --json prints): model, hardware, request, counts, the top K
/// feasible layouts with their terms, the rejections grouped by kind, notes. `sub` tells which
/// options were given. Errors: InputError, one line: an unknown model (the nearest name), a
/// missing or malformed hardware file (naming the key), --gpus < 1, a --tp/--pp/--dp that does
/// not divide --gpus, no layout of the model's heads and layers on N GPUs, and no feasible layout
/// ("no layout of <model> on N GPUs fits <memory>: the smallest needs <bytes> (<layout>)").
nlohmann::json plan_json(const CLI::App& sub, const PlanArgs& args);
/// The human-readable report of a plan_json document.
std::string plan_text(const nlohmann::json& plan);

/// This machine's hardware file, measured over `world` (collective; the CPU backend, every rank
/// at once): calibrate_step_time (suites/step_time_calibration.h) on the ops of a one-layer GPT
/// of C 256 over 128 tokens in each precision; the GEMM and attention rates, the memory-bound ops',
/// the all-reduce fits per group size, send/receive, the host link and pass, ranks per core.
/// No published peak exists for a CPU: peak_tflops is one rank's measured GEMM rate alone on a
/// core. Memory per rank: the physical memory over the ranks; one node of world.size() ranks.
/// Errors: InputError for a world of one rank (no collective to fit); std::runtime_error when a
/// fit finds no bandwidth (a machine too noisy to measure).
HardwareSpec calibrate_hardware(Communicator& world);

/// Runs the subcommand: with --validate FILE, the published set judged (harness/plan_validate.h),
/// alone or with --json; with --calibrate, calibrate_hardware and its file written (rank 0), then
/// the plan on it when --gpus is given; otherwise the plan on --hardware. Prints the text report
/// (or JSON with --json) when `print`. Returns 0. Errors: as plan_json; --gpus or --hardware
/// missing without --calibrate, or --hardware with it; calibrate_hardware's.
int cmd_plan(Communicator& world, const CLI::App& sub, const PlanArgs& args, bool print);

}  // namespace dtb
