// Hardware files: a named system's rates for the step-time model and the planner, as JSON with
// the units in the key names (harness/hardware/*.json; docs/plan.md#hardware-files), read and
// written here. Not the model (reference/analytic/step_time_model.h) and not the calibration that measures
// one (suites/step_time_calibration.h).
#pragma once
#include <array>
#include <string>

#include <nlohmann/json.hpp>

#include "reference/analytic/planner.h"
#include "reference/analytic/step_time_model.h"

namespace dtb {

/// A hardware file's content in SI units. Keys of the file (every one required, no others):
/// name, description, device_memory_gib, ranks_per_node, peak_tflops {fp32, bf16, fp16},
/// gemm and attention {fp32, bf16, fp16: {alpha_us, tflops}}, memory {alpha_us, gb_per_s},
/// collectives [{group, link: "intra_node" | "inter_node", alpha_us, busbw_gb_per_s}, ...],
/// p2p_intra, p2p_inter, host_link {alpha_us, gb_per_s}, sources {field: "where the figure
/// comes from"}; optional: ranks_per_core (>= 1, default 1) and host_pass {alpha_us,
/// g_elements_per_s} (StepTimeHardware's; written by a calibration of a CPU machine); the shape
/// model's figures, all or none (reference/analytic/gemm_model.h): sm_count, gemm_tiles [[m, n],
/// ...] largest first, gemm_fraction {fp32, bf16, fp16} in (0, 1], l2_gb_per_s, fused_attention
/// [{head_dim, forward, backward}, ...] ascending; attention_kernel "materialized" (default) or
/// "fused" (which needs the shape model); ring_protocols [{name, base_us, intra_step_us,
/// inter_step_us, busbw_fraction in (0, 1][, intra_step_multi_node_us, busbw_fraction_multi_node]},
/// ...] (NCCL's ring model for all-gather and reduce-scatter, RingProtocol, the multi-node figures
/// defaulting to the one-node ones; absent: they take the all-reduce fit's alpha).
/// GB = 1e9 bytes (nccl-tests' unit), GiB = 2^30 bytes, TFLOP/s = 1e12 FLOP/s.
struct HardwareSpec {
  std::string name;
  std::string description;
  double device_memory_bytes = 0;      // one GPU's memory, bytes
  std::array<double, 3> peak_flops{};  // dense peak FLOP/s per precision (index int(Precision))
  StepTimeHardware hw;                 // rates in seconds, bytes/s, FLOP/s; op_seconds empty
  /// The attention kernel the machine's trainers run: `dtbench plan`'s default.
  AttentionKernel attention_kernel = AttentionKernel::materialized;
  nlohmann::json sources = nlohmann::json::object();  // field -> source text, as the file has it
  /// What reference/analytic/planner.h takes of it.
  PlannerHardware planner() const { return {hw, device_memory_bytes, peak_flops}; }
};

/// The spec in the file's schema (the document write_hardware_file writes). Values are written so
/// that hardware_from_json gives them back exactly where such a number exists (any spec read from
/// a file); otherwise to within one unit in the last place.
nlohmann::json hardware_to_json(const HardwareSpec& s);

/// Parses a document in the schema, strictly. Errors: InputError "<where>: <what>" naming the key
/// by its dotted path: missing "memory.gb_per_s", unknown key "gemm.bf16.tflop" (with the
/// nearest valid name), "ranks_per_node" must be an integer, a rate or peak that is not > 0, an
/// alpha < 0, a group < 2, a link other than intra_node / inter_node, a shape figure without the
/// others, a fraction outside (0, 1], a tile side outside [1, 4096], head dimensions not
/// ascending, an attention_kernel other than materialized / fused, fused without the shape model,
/// ring_protocols not an array of 1 to 8, a protocol not an object, a name repeated, empty or
/// over 16 characters, a step latency < 0, a fraction outside (0, 1].
HardwareSpec hardware_from_json(const nlohmann::json& j, const std::string& where);

/// Reads and parses `path` (read_input_file: a readable regular file of at most 1 MiB). `where`
/// names it in messages (the path when empty). Errors: InputError for a missing, unreadable or
/// oversized file ("hardware file not found or unreadable: <path>"), malformed JSON, a duplicated
/// key (parse_json_input), and hardware_from_json's.
HardwareSpec load_hardware_file(const std::string& path, const std::string& where = "");

/// Writes hardware_to_json(s) to `path` (indented, newline-terminated). Errors: InputError when
/// the file cannot be written.
void write_hardware_file(const std::string& path, const HardwareSpec& s);

/// The file of a --hardware argument: a path when it names an existing file or has a '/' or ends
/// in ".json", else harness/hardware/<arg>.json in the source tree (harness/source_dir.h).
/// Errors: InputError for an unknown name (the nearest of the files there) or a missing file.
std::string resolve_hardware_file(const std::string& arg);

}  // namespace dtb
