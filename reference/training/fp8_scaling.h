// FP8 per-tensor delayed scaling, as Transformer Engine's DelayedScaling recipe (TE 2.x)
// (transformer_engine.common.recipe.DelayedScaling; the update is
// transformer_engine/common/recipe/delayed_scaling.cu, amax_and_scale_update_after_reduction,
// and docs/features/low_precision_training/fp8_delayed_scaling): each FP8 tensor keeps an amax
// history of amax_history_len floats. Position 0 is the staging slot: every quantization of the
// tensor while a step runs takes the max of it and the tensor's amax. At the update (TE: when the
// autocast region exits, after the amax reduction over the amax reduction group):
//   last = the reduced amax if given and non-zero, else history[0];
//   if last != 0, the history rolls: history[i] = history[i+1] for 1 <= i < L-1, history[L-1] = last,
//     history[0] = 0 (the oldest value drops); if last == 0 (the tensor was not quantized), it stays;
//   amax = "max": the largest of the L values before the roll (history[1..L-1] and last; 0 without a
//     roll), "most_recent": last;
//   scale = FP8_MAX * 2^-margin / amax when amax is finite and > 0, else the previous scale; an
//     infinite quotient (amax below FP8_MAX / FLT_MAX) becomes FLT_MAX; scale_inv = 1 / scale.
// The scale quantizes the next step: q = fp8(x * scale), x ~ fp8_value(q) * scale_inv.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/fp8.h"

namespace dtb {

/// How the delayed recipe picks the amax its scale comes from (DelayedScaling.amax_compute_algo).
enum class AmaxComputeAlgo { max, most_recent };

/// "max" / "most_recent" -> the algo; anything else throws InputError naming the value and `key`.
AmaxComputeAlgo parse_amax_compute_algo(const std::string& text, const std::string& key);
/// "max" or "most_recent".
const char* to_string(AmaxComputeAlgo a);

/// DelayedScaling's settings and defaults: margin 0 (the scale is reduced by 2^margin),
/// amax_history_len 1024, amax_compute_algo "max".
struct Fp8DelayedScalingConfig {
  int margin = 0;
  int amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::max;
};

/// Throws InputError naming the value unless 0 <= margin <= 64 and 1 <= amax_history_len <= 2^20.
void validate_fp8_delayed_scaling(const Fp8DelayedScalingConfig& cfg);

/// One FP8 tensor's delayed-scaling state (a "scaling factor" slot of TE's fp8 meta): what a
/// checkpoint saves so that a resumed run quantizes bitwise as the uninterrupted one.
struct Fp8TensorScaling {
  std::vector<float> amax_history;  // amax_history_len floats; [0] the staging slot
  float scale = 1.0f;               // TE initialises scale and scale_inv to 1
  float scale_inv = 1.0f;

  /// A fresh state: history of `history_len` (>= 1; aborts otherwise) zeros, scale 1.
  explicit Fp8TensorScaling(int history_len = 1);
  /// A quantization of the tensor saw `amax` (>= 0): history[0] = fmax(history[0], amax) (a NaN
  /// amax leaves it as it was, as fmaxf does).
  void record(float amax);
  /// The update at the end of a step for an element format `f` (FP8_MAX = fp8_max(f)); `reduced`
  /// is the amax after the reduction over the amax reduction group (0: none, history[0] is used;
  /// a NaN one is taken as it comes and leaves the scale as it was). Aborts (DTB_CHECK) when the
  /// history's length is not cfg.amax_history_len.
  void update(const Fp8DelayedScalingConfig& cfg, Fp8Format f, float reduced = 0.0f);
};

/// The FP8 training recipes, named after Transformer Engine's (TE 2.x,
/// transformer_engine.common.recipe): which operands of a linear's three GEMMs (forward: input and
/// weight; dgrad: output gradient and weight; wgrad: output gradient and input) are scaled how.
///   delayed    DelayedScaling: per tensor, the scale from the amax history (Fp8TensorScaling)
///   current    Float8CurrentScaling: per tensor, fp8_scale_from_amax of the tensor's amax (a sharded
///              tensor's reduced over its group: reference/training/fp8_linear.h says how that
///              differs from TE under TP)
///              (power_2_scale off, amax_epsilon 0)
///   blockwise  Float8BlockScaling: 1 x 128 tiles for inputs and gradients, 128 x 128 blocks for
///              weights, power-of-two scales
///   mxfp8      MXFP8BlockScaling: 1 x 32 blocks with E8M0 scales for every operand
enum class Fp8Recipe { delayed, current, blockwise, mxfp8 };
/// "delayed", "current", "blockwise", "mxfp8".
const char* to_string(Fp8Recipe r);

/// TE's recipe.Format: hybrid (E4M3 for inputs and weights, E5M2 for output gradients) or e4m3
/// (everywhere). E5M2 everywhere, which TE's Format also names, trains no model it documents.
enum class Fp8FormatChoice { hybrid, e4m3 };
/// "hybrid", "e4m3".
const char* to_string(Fp8FormatChoice f);

/// An FP8 linear operand's role in the three GEMMs.
enum class Fp8Role { input, weight, grad_output };

/// A run's FP8 settings: the `fp8` section of a config with train.precision "fp8". Defaults are
/// TE's: fp8_format hybrid for delayed and current, e4m3 for blockwise and mxfp8 (their
/// recipes' defaults); the delayed settings (margin, amax_history_len, amax_compute_algo) are
/// DelayedScaling's, and dtbench applies them to that recipe alone (TE's MXFP8BlockScaling also
/// carries a margin field; dtbench's MXFP8 scales are kernels/fp8.h's E8M0 rule, with none).
struct Fp8Settings {
  Fp8Recipe recipe = Fp8Recipe::delayed;
  Fp8FormatChoice fp8_format = Fp8FormatChoice::hybrid;
  Fp8DelayedScalingConfig delayed{};
};

/// The operand of `role` under `s`: E5M2 for grad_output under hybrid, else E4M3; per_tensor
/// (delayed, current), tile_1x128 or block_128x128 for weights (blockwise), mx_1x32 (mxfp8);
/// `scale` is the per-tensor scale (delayed: the history's; current: from the reduced amax) and
/// is ignored by the block recipes.
Fp8Operand fp8_operand(const Fp8Settings& s, Fp8Role role, float scale = 1.0f);

/// Reads an `fp8` section (a JSON object; `path` names it in messages, e.g. "train.fp8"): keys
/// recipe, fp8_format, margin, amax_history_len, amax_compute_algo, each optional. Errors, one
/// line each: InputError "<path>: unknown key '<key>' (keys: ...)"; "<path>.<key>: ..." for a
/// value of the wrong type, a name that is not one of the listed ones (naming it), or a
/// delayed-scaling key given with another recipe (it would be silently ignored); "<path>: fp8
/// <key> = <v> must be in [lo, hi]" out of range (validate_fp8_delayed_scaling); "<path>: must be
/// an object" for a section that is not one.
Fp8Settings fp8_settings_from_json(const nlohmann::json& section, const std::string& path);
/// The settings as a section fp8_settings_from_json reads back to equal settings (every key
/// written: the delayed keys only for the delayed recipe), for reports and checkpoints.
nlohmann::json fp8_settings_json(const Fp8Settings& s);

/// Reads a list of `fp8` sections (a suite's FP8 rows, one per recipe: the precision suite's
/// `precision.fp8`, the conformance suite's `conformance.fp8`), each by fp8_settings_from_json as
/// "<path>[i]". Errors, one line each: InputError "<path>: must be a list of FP8 recipe sections
/// (docs/fp8.md), e.g. [{"recipe": "delayed"}]"; fp8_settings_from_json's; "<path>[i]: recipe <r>
/// is listed twice (<path>[j]); its row is named after it".
std::vector<Fp8Settings> fp8_settings_list_from_json(const nlohmann::json& list, const std::string& path);

}  // namespace dtb
