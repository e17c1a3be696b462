// `dtbench plan`: every layout of a dense GPT on N GPUs of a named system (reference/planner.h
// on a hardware file, harness/hardware_file.h), the feasible ones ranked by predicted step time
// with memory per GPU, tokens/s, MFU and the main terms, and the rest grouped by why they were
// rejected; JSON with --json. Nothing runs: the memory and the step are models (docs/plan.md).
#pragma once
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace dtb {

/// The options of `dtbench plan`, as given (sentinels: 0, -1 or empty = not given).
struct PlanArgs {
  std::string model;
  int layers = 0, hidden = 0, heads = 0, vocab = 0, seq = 0;
  int gpus = 0;
  std::string hardware;
  int global_batch = 0, micro_batch_size = 1;
  std::string precision = "bf16";
  int tp = 0, pp = 0, dp = 0, zero_stage = -1;
  int top = 10;
  bool json = false;
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

/// Runs the subcommand: prints the text report (or JSON with --json) when `print`. Returns 0.
/// Errors: as plan_json.
int cmd_plan(const CLI::App& sub, const PlanArgs& args, bool print);

}  // namespace dtb
