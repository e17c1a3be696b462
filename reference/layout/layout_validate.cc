// The one validator of a layout; see layout_validate.h.
#include "reference/layout/layout_validate.h"

#include <algorithm>

#include "kernels/error.h"
#include "reference/layout/layout_runner.h"
#include "reference/training/dp_sync.h"
#include "reference/training/fp8_linear.h"
#include "reference/zero/zero_config.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

const char* to_string(LayoutRule r) {
  switch (r) {
    case LayoutRule::divisibility: return "divisibility";
    case LayoutRule::zero: return "zero";
    case LayoutRule::schedule: return "schedule";
    case LayoutRule::moe: return "moe";
    case LayoutRule::arch: return "arch";
    case LayoutRule::dp_sync: return "dp_sync";
    case LayoutRule::checkpoint: return "checkpoint";
    case LayoutRule::dp_allreduce: return spelling(LayoutKey::dp_allreduce).config_key;
    case LayoutRule::cp: return spelling(LayoutKey::cp).config_key;
    case LayoutRule::fp8: return "fp8";
  }
  return "?";
}

void validate_arch_layout(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c) {
  if (!is_llama(model)) return;
  if (c.backend != "cpu") throw InputError(llama_not_supported("the " + printable(c.backend, 40) + " backend"));
  if (const std::string why = llama_tp_refusal(model, s.l.tp); !why.empty()) throw InputError(why);
}

void validate_schedule_recompute(const ParallelLayout& l, Recompute r) {
  if (l.schedule == "zb-h1" && r == Recompute::full)
    throw InputError("schedule zb-h1 with recompute full is not supported (W needs the activations B used)");
}

void validate_cp_layout(const LayoutSpec& s, const GptConfig& model, const std::string& backend) {
  if (s.l.cp <= 1) return;
  const std::string cp = std::string(spelling(LayoutKey::cp).config_key) + " = " + std::to_string(s.l.cp);
  auto refuse = [&](const std::string& why) { throw InputError(cp + " with " + why + " is not supported yet"); };
  if (model.moe.num_experts > 0 || s.l.ep > 1)
    refuse("an MoE model (model.num_experts = " + std::to_string(model.moe.num_experts) + ", " +
           spelling(LayoutKey::ep).config_key + " = " + std::to_string(s.l.ep) + ")");
  if (!s.dp_sync.synchronous())
    refuse(s.dp_sync.staleness > 0 ? std::string("stale gradients (") + spelling(LayoutKey::staleness).config_key + " = " +
                                         std::to_string(s.dp_sync.staleness) + ")"
                                   : std::string("local steps (") + spelling(LayoutKey::local_steps).config_key + " = " +
                                         std::to_string(s.dp_sync.local_steps) + ")");
  if (backend != "cpu") refuse("the " + printable(backend, 40) + " backend (the block attention ops are on the CPU only so far)");
  if (s.l.schedule == "zb-h1") refuse("schedule zb-h1");
  if (s.hier_node_ranks > 0) refuse("the hierarchical DP all-reduce (" + std::string(spelling(LayoutKey::dp_allreduce).spec_token) +
                                    std::to_string(s.hier_node_ranks) + ")");
}

void validate_fp8_layout(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c) {
  if (!s.fp8) return;
  const std::string recipe = std::string("fp8 recipe ") + to_string(s.fp8->recipe);
  if (s.precision == Precision::fp16)
    throw InputError(recipe + " with precision fp16 is not supported (FP8 keeps bf16, or fp32, everywhere else)");
  if (c.backend != "cpu")
    throw InputError(recipe + " on the " + printable(c.backend, 40) + " backend is not supported yet (FP8 GEMMs on the "
                     "CPU only)");
  if (model.moe.num_experts > 0)
    throw InputError(recipe + " with an MoE model (model.num_experts = " + std::to_string(model.moe.num_experts) +
                     ") is not supported yet (its experts are not FP8 linears)");
  const ParallelLayout& l = s.l;
  // The delayed recipe's amaxes are reduced over the data-and-context group at the step's end and
  // the tile recipes' tiles stay inside a CP chunk (validate_fp8_shards): CP2 is their one-rank
  // twin's within the layout contract (reference/parallel/fp8_layout_test.cc). Current scaling
  // recomputes each GEMM's scale from values the CP attention's merge perturbs at the rounding of
  // fp32: one value flipped to the next FP8 number that reaches a gradient's amax re-rounds that
  // whole tensor (a GPT CP2 step-0 gradient 8e-3 from its twin, 3x the bound, with the amaxes
  // reduced over CP; 2e-2 without: docs/fp8.md).
  if (l.cp > 1 && s.fp8->recipe == Fp8Recipe::current)
    throw InputError(recipe + " with context_parallel = " + std::to_string(l.cp) +
                     " is not supported yet (its per-GEMM scales follow values the CP attention perturbs, and no "
                     "contract bounds how far a flipped FP8 value moves them; the delayed, blockwise and mxfp8 "
                     "recipes run under CP)");
  if (!s.dp_sync.synchronous())
    throw InputError(recipe + " with stale gradients or local steps is not supported yet (the delayed recipe "
                     "reduces its amaxes over DP every step)");
  if (is_llama(model) && l.tp > kv_heads(model))
    throw InputError(recipe + " with tensor_parallel = " + std::to_string(l.tp) + " above model.num_kv_heads = " +
                     std::to_string(kv_heads(model)) +
                     " is not supported yet (a shared KV head's gradient would be quantized before its sum over "
                     "the ranks sharing it)");
  try {
    validate_fp8_delayed_scaling(s.fp8->delayed);
  } catch (const InputError& e) {
    throw InputError(recipe + ": " + e.what());
  }
  const int64_t seq = c.seq_len > 0 ? c.seq_len : model.T, per = int64_t(l.dp) * std::max(1, l.micro_batches);
  if (l.dp > 0 && l.cp > 0 && c.global_batch % per == 0 && seq % (2 * l.cp) == 0)  // else validate_layout refuses
    validate_fp8_shards(*s.fp8, model, l, c.global_batch / per * (seq / l.cp), seq);
}

std::string dp_sync_checkpoint_refusal(const DpSync& d, const std::string& path, int checkpoint_every,
                                       const std::string& resume_from) {
  if (d.synchronous() || (checkpoint_every <= 0 && resume_from.empty())) return "";
  const std::string what = d.staleness > 0 ? path + ".staleness = " + std::to_string(d.staleness)
                                           : path + ".local_steps = " + std::to_string(d.local_steps);
  const std::string with = checkpoint_every > 0
                               ? path + ".checkpoint_every = " + std::to_string(checkpoint_every)
                               : path + ".resume_from = \"" + printable(resume_from, 40) + "\"";
  return what + " with " + with + ": not supported (the in-flight gradients and outer state are not checkpointed)";
}

std::vector<LayoutRefusal> layout_refusals(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c) {
  std::vector<LayoutRefusal> out;
  const std::string where = c.where.empty() ? c.path : c.where;
  // Runs one rule; its InputError becomes the rule's refusal, `head` + ": " before the message.
  auto check = [&](LayoutRule rule, const std::string& head, auto&& rule_fn) {
    try {
      rule_fn();
    } catch (const InputError& e) {
      out.push_back({rule, e.what(), head.empty() ? std::string(e.what()) : head + ": " + e.what()});
    }
  };
  check(LayoutRule::divisibility, where, [&] { validate_layout(s.l, model, c.global_batch, c.world, c.seq_len); });
  check(LayoutRule::zero, where, [&] { validate_zero(s.z); });
  check(LayoutRule::schedule, where, [&] { validate_schedule_recompute(s.l, s.recompute); });
  check(LayoutRule::moe, "", [&] { validate_moe_layout(s, model, c.backend, where); });
  check(LayoutRule::arch, where, [&] { validate_arch_layout(s, model, c); });
  // The DP sync messages name their keys under c.path; a `where` apart from it goes before them.
  const std::string keyed = c.where.empty() ? "" : c.where;
  check(LayoutRule::dp_sync, keyed, [&] {
    validate_dp_sync(s.dp_sync, s.precision, c.recipe, c.path);
    validate_dp_sync_layout(s.dp_sync, s.l, s.z, c.path);
  });
  const std::string ck = dp_sync_checkpoint_refusal(s.dp_sync, c.path, c.checkpoint_every, c.resume_from);
  if (!ck.empty()) out.push_back({LayoutRule::checkpoint, ck, keyed.empty() ? ck : keyed + ": " + ck});
  check(LayoutRule::cp, where, [&] { validate_cp_layout(s, model, c.backend); });
  check(LayoutRule::fp8, where, [&] { validate_fp8_layout(s, model, c); });
  if (s.hier_node_ranks > 0)
    check(LayoutRule::dp_allreduce,
          c.where.empty() ? c.path + "." + spelling(LayoutKey::dp_allreduce).config_key : c.where,
          [&] { validate_dp_hierarchical(s.l, s.z.stage, s.hier_node_ranks); });
  return out;
}

void validate_layout_spec(const LayoutSpec& s, const GptConfig& model, const LayoutCheckContext& c) {
  const std::vector<LayoutRefusal> r = layout_refusals(s, model, c);
  if (!r.empty()) throw InputError(r.front().message);
}

}  // namespace dtb
