#include "harness/memory_cli.h"
#include "harness/memory_rules.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <numeric>
#include <tuple>

#include <CLI/CLI.hpp>

#include "harness/cli_text.h"
#include "harness/config.h"
#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/analytic/planner.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

using nlohmann::json;

namespace {
// The layout's keys in `dtbench memory --json`: a record's fields (reference/layout/layout_spec.h).
const std::string kTp = field_key(LayoutKey::tp), kPp = field_key(LayoutKey::pp), kDp = field_key(LayoutKey::dp);
const std::string kSp = field_key(LayoutKey::sequence_parallel), kVirtualStages = field_key(LayoutKey::virtual_stages);
const std::string kPipelineLayers = field_key(LayoutKey::pipeline_layers);
const std::string kZeroStage = field_key(LayoutKey::zero_stage), kOffload = field_key(LayoutKey::offload);
const std::string kCp = field_key(LayoutKey::cp), kCpComm = field_key(LayoutKey::cp_comm_type);

GptConfig moe_6b() {
  GptConfig m{24, 2048, 16, 2048, 50257};
  m.moe.num_experts = 64, m.moe.topk = 8, m.moe.ffn_hidden = 864;
  return m;
}

// A Llama 3 model of Dubey et al. 2024, Table 3: 8 KV heads, vocabulary 128256, RoPE base 5e5,
// T 131072 (the longest sequence Meta trained, the 405B's long-context phase, Table 4).
GptConfig llama3(int L, int C, int NH, int F) {
  GptConfig m{L, C, NH, 131072, 128256};
  m.arch = ModelArch::llama;
  m.num_kv_heads = 8;
  m.ffn_hidden = F;
  m.rope_theta = 5e5;
  return m;
}

// Meta's 405B runs, Dubey et al. 2024 Table 4 (GPUs, TP, CP, PP, DP, sequence, sequences per DP
// rank, BF16 MFU), each 16M tokens a step.
const char* const kLlama3Table4 = "Dubey et al. 2024, The Llama 3 Herd of Models, Table 4";
// The one batch the paper gives (the 405B's, Table 4), taken for the family.
const char* const kLlama3Batch = "the Llama 3 405B's 16M tokens, Dubey et al. 2024 Table 4, taken for the family";
std::vector<PublishedLayout> llama3_405b_layouts() {
  return {{8192, 8, 1, 16, 64, 8192, 32, 0.43, kLlama3Table4},
          {16384, 8, 1, 16, 128, 8192, 16, 0.41, kLlama3Table4},
          {16384, 8, 16, 16, 8, 131072, 16, 0.38, kLlama3Table4}};
}
}  // namespace

const std::vector<NamedModel>& named_models() {
  static const std::vector<NamedModel> models = {
      {"gpt2-124m", {12, 768, 12, 1024, 50257}, "GPT-2 small (Radford et al. 2019)"},
      {"1b", {20, 2048, 16, 2048, 50257}, "GPT-3 XL's width (Brown et al. 2020), 20 layers, 16 heads of 128"},
      {"3b", {36, 2560, 20, 2048, 50257}, "GPT-3 2.7B's width, 36 layers, 20 heads of 128"},
      {"10b", {32, 5120, 40, 2048, 50257}, "GPT-3 13B's width, 32 layers, 40 heads of 128"},
      {"gpt3-175b", {96, 12288, 96, 2048, 50257}, "GPT-3 175B (Brown et al. 2020, Table 2.1)"},
      {"moe-6b", moe_6b(), "the article's MoE (6.2: 6B parameters, 1.2B active, 8 of 64 experts): 1b's width, 24 "
                           "layers of 64 experts of 864, top-8"},
      {"llama3-8b", llama3(32, 4096, 32, 14336), "Llama 3 8B (Dubey et al. 2024, Table 3)", 8192, 16 << 20,
       kLlama3Batch},
      {"llama3-70b", llama3(80, 8192, 64, 28672), "Llama 3 70B (Dubey et al. 2024, Table 3)", 8192, 16 << 20,
       kLlama3Batch},
      {"llama3-405b", llama3(126, 16384, 128, 53248), "Llama 3 405B (Dubey et al. 2024, Table 3)", 8192,
       16 << 20, kLlama3Batch, llama3_405b_layouts()},
  };
  return models;
}

const NamedModel& find_named_model(const std::string& name) {
  std::vector<std::string> names;
  for (const NamedModel& nm : named_models()) {
    if (nm.name == name) return nm;
    names.push_back(nm.name);
  }
  const std::string near = nearest_name(name, names);
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  throw InputError("unknown model '" + printable(name) + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
                   "; named models: " + all);
}

std::string commas(uint64_t x) {
  std::string s = std::to_string(x), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

namespace {

constexpr double kGiB = 1073741824.0;
constexpr const char* kCats[] = {"param", "grad", "master_param", "optimizer_state", "activation", "workspace"};
constexpr MemCategory kCatIds[] = {MemCategory::param,           MemCategory::grad,       MemCategory::master_param,
                                   MemCategory::optimizer_state, MemCategory::activation, MemCategory::workspace};

using cli::flag;
using cli::fmt;
using cli::given;

// A count option, when given, in [min, max] (max: the planner's bounds, reference/analytic/planner.h, past
// which a plan only allocates: 2e9 micro-batches threw bad_alloc).
void positive(const CLI::App& sub, const char* opt, long long v, long long min = 1, long long max = kMaxPlanGpus) {
  if (given(sub, opt) && (v < min || v > max))
    throw InputError(std::string(opt) + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                     std::to_string(v));
}

template <typename Num>
json bytes_json(const MemoryBytes<Num>& m, Tier t) {
  json j = json::object();
  for (size_t i = 0; i < std::size(kCats); ++i) j[kCats[i]] = m.get(t, kCatIds[i]);
  j["total"] = m.total(t);
  return j;
}


// --params: the ZeRO paper's model-state table and DeepSpeed's estimators.
json params_plan(const CLI::App& sub, const MemoryArgs& a) {
  for (const char* opt : {"--model", "--layers", "--hidden", "--heads", "--vocab", "--seq", flag(LayoutKey::virtual_stages),
                          flag(LayoutKey::schedule), flag(LayoutKey::micro_batches), "--micro-batch-size",
                          flag(LayoutKey::recompute), "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
                          "--moe-layer-freq", flag(LayoutKey::ep), flag(LayoutKey::sequence_parallel),
                          flag(LayoutKey::pipeline_layers), "--arch", "--kv-heads", "--ffn-hidden", "--attention"})
    if (given(sub, opt))
      throw InputError(std::string("--params and ") + opt + " exclude each other: --params plans model states "
                       "only (the ZeRO paper's accounting), without a model; " + opt + " describes a model or its step");
  if (a.tp != 1 || a.pp != 1 || a.cp != 1)
    throw InputError("--params plans data parallelism only (ZeRO over --dp); give a model for --tp/--pp/--cp");
  if (!(a.params >= 1) || !(a.params <= 1e18))
    throw InputError("--params must be a number in [1, 1e18], got " + fmt("%g", a.params));
  if (given(sub, "--largest-layer-params") && !(a.largest_layer_params >= 1 && a.largest_layer_params <= a.params))
    throw InputError("--largest-layer-params must be in [1, --params], got " + fmt("%g", a.largest_layer_params));
  positive(sub, flag(LayoutKey::dp), a.dp);
  const Precision p = parse_precision(a.precision);
  const Offload off = parse_offload(a.offload);
  zero_model_states(a.params, p, a.zero_stage, a.dp, off);  // validates stage and offload
  const int gpn = a.gpus_per_node > 0 ? a.gpus_per_node : std::gcd(a.dp, 8);
  if (given(sub, "--gpus-per-node") && (a.gpus_per_node < 1 || a.dp % a.gpus_per_node != 0))
    throw InputError("--gpus-per-node " + std::to_string(a.gpus_per_node) + " does not divide --dp " +
                     std::to_string(a.dp));
  const int nodes = a.dp / gpn;

  json j;
  j["mode"] = "params";
  j["params"] = a.params;
  j["precision"] = to_string(p);
  j[kDp] = a.dp;
  j[kZeroStage] = a.zero_stage;
  j[kOffload] = to_string(off);
  const StateBytesPerParam k = state_bytes_per_param(p);
  j["bytes_per_param"] = {{"param", k.param}, {"grad", k.grad}, {"master_param", k.master_param},
                          {"optimizer_state", k.optimizer_state}, {"total", k.total()}};
  const char* names[4] = {"DP", "P_os", "P_os+g", "P_os+g+p"};  // layout-key-literal: the ZeRO paper's columns
  for (int z = 0; z < 4; ++z) {
    const MemoryBytes<double> m = zero_model_states(a.params, p, z, a.dp);
    j["zero_stages"].push_back({{"stage", z}, {"name", names[z]}, {"device_bytes", bytes_json(m, Tier::device)}});
  }
  if (off == Offload::cpu) {
    const MemoryBytes<double> m = zero_model_states(a.params, p, a.zero_stage, a.dp, off);
    j["offload"] = {{"stage", a.zero_stage}, {"device_bytes", bytes_json(m, Tier::device)},
                    {"host_bytes", bytes_json(m, Tier::host)}};
  }
  json ds;
  ds["gpus_per_node"] = gpn;
  ds["num_nodes"] = nodes;
  for (bool o : {true, false}) {
    const DeepSpeedEstimate e = deepspeed_zero2_estimate(a.params, gpn, nodes, o);
    ds["zero2"].push_back({{kOffload, o ? "cpu" : "none"}, {"legacy", false}, {"cpu_bytes", e.cpu_bytes},
                           {"gpu_bytes", e.gpu_bytes}});
  }
  // DeepSpeed's docs (memory.rst) still print the formula before 18: 4P + 16P/N.
  const DeepSpeedEstimate old = deepspeed_zero2_estimate(a.params, gpn, nodes, false, 1.5, true);
  ds["zero2"].push_back(
      {{kOffload, "none"}, {"legacy", true}, {"cpu_bytes", old.cpu_bytes}, {"gpu_bytes", old.gpu_bytes}});
  if (a.largest_layer_params >= 0) {
    ds["largest_layer_params"] = a.largest_layer_params;
    for (auto [o, op] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}})
      for (bool zi : {true, false}) {
        const DeepSpeedEstimate e = deepspeed_zero3_estimate(a.params, a.largest_layer_params, gpn, nodes, o, op, zi);
        ds["zero3"].push_back({{"offload_param", op ? "cpu" : "none"}, {kOffload, o ? "cpu" : "none"},
                               {"zero_init", zi}, {"cpu_bytes", e.cpu_bytes}, {"gpu_bytes", e.gpu_bytes}});
      }
  }
  j["deepspeed"] = ds;
  const double mine = zero_model_states(a.params, p, 2, a.dp).total(Tier::device);
  const double theirs = deepspeed_zero2_estimate(a.params, gpn, nodes, false).gpu_bytes;
  j["rules_of_thumb"].push_back(memory_rule(
      "16 B/param of model state (ZeRO paper: 2 + 2 + K, K = 12)",
      p == Precision::fp32 ? "fp32 Adam: 4 param + 4 grad + 8 Adam m, v = 16 B/param; no separate fp32 master copy "
                             "(AdamW updates the fp32 weights themselves), so K = 8 and the weights are 4 bytes"
                           : "mixed precision: 2 param + 2 grad + 4 fp32 master + 8 Adam m, v = 16 B/param",
      true));
  j["rules_of_thumb"].push_back(memory_rule(
      "DeepSpeed ZeRO-2 GPU estimate 2 + 18/N B/param (2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam)",
      fmt("ZeRO-2 here %.2f GiB vs DeepSpeed %.2f GiB: DeepSpeed counts fp16 and fp32 gradients, the paper a 16-bit "
          "gradient shard only",
          mine / kGiB, theirs / kGiB),
      std::abs(mine - theirs) < 0.005 * mine));
  return j;
}

GptConfig resolve_model(const CLI::App& sub, const MemoryArgs& a, std::string* name, json* notes) {
  const bool shape = given(sub, "--layers") || given(sub, "--hidden") || given(sub, "--heads") || given(sub, "--vocab") ||
                     given(sub, "--arch") || given(sub, "--kv-heads") || given(sub, "--ffn-hidden");
  GptConfig m;
  if (given(sub, "--model")) {
    if (shape)
      throw InputError("give --model NAME or the shape (--layers --hidden --heads --vocab; --arch --kv-heads --ffn-hidden), "
                       "not both");
    const NamedModel* found = &find_named_model(a.model);
    m = found->cfg;
    *name = found->name;
    // Megatron pads the vocabulary to a multiple of 128 x tp (--make-vocab-size-divisible-by).
    if (a.tp >= 1 && m.V % a.tp != 0) {
      const int q = 128 * a.tp, padded = (m.V + q - 1) / q * q;
      notes->push_back(fmt("vocabulary padded %d -> %d (a multiple of 128 x tp, as Megatron-LM pads it) so that it "
                           "divides over TP %d",
                           m.V, padded, a.tp));
      m.V = padded;
    }
  } else {
    if (!given(sub, "--layers") || !given(sub, "--hidden") || !given(sub, "--heads"))
      throw InputError("give --model NAME, or --layers, --hidden and --heads (with --vocab, --seq), or --params P");
    m.L = a.layers;
    m.C = a.hidden;
    m.NH = a.heads;
    m.V = given(sub, "--vocab") ? a.vocab : 50257;
    m.T = given(sub, "--seq") ? a.seq : 1024;
    // The Llama family by shape: the config's model.arch, num_kv_heads and ffn_hidden_size.
    m.arch = parse_model_arch(a.arch, "--arch");
    if (!is_llama(m))
      for (const char* o : {"--kv-heads", "--ffn-hidden"})
        if (given(sub, o))
          throw InputError(std::string(o) + " is a Llama option but --arch is \"gpt2\" (give --arch llama)");
    positive(sub, "--kv-heads", a.kv_heads);
    positive(sub, "--ffn-hidden", a.ffn_hidden, 1, int64_t(1) << 30);
    m.num_kv_heads = a.kv_heads;
    m.ffn_hidden = a.ffn_hidden;
    *name = "custom";
  }
  for (auto [opt, v] : {std::pair{"--layers", a.layers}, std::pair{"--hidden", a.hidden}, std::pair{"--heads", a.heads},
                        std::pair{"--vocab", a.vocab}, std::pair{"--seq", a.seq}})
    positive(sub, opt, v);
  // The MoE options turn the model's FFNs into experts (or set a named MoE model's).
  for (auto [opt, v, min] : {std::tuple{"--num-experts", a.num_experts, 0}, std::tuple{"--moe-router-topk", a.moe_topk, 1},
                             std::tuple{"--moe-ffn-hidden-size", a.moe_ffn_hidden, 0},
                             std::tuple{"--moe-layer-freq", a.moe_layer_freq, 1}, std::tuple{flag(LayoutKey::ep), a.ep, 1}})
    positive(sub, opt, v, min);
  if (a.num_experts > (1 << 16))  // the config's bound (model.num_experts)
    throw InputError("--num-experts must be <= 65536, got " + std::to_string(a.num_experts));
  const bool named_moe = m.moe.num_experts > 0;  // a named MoE model keeps its settings unless given
  if (given(sub, "--num-experts")) m.moe.num_experts = a.num_experts;
  if (m.moe.num_experts > 0) {
    if (given(sub, "--moe-router-topk") || !named_moe) m.moe.topk = a.moe_topk;
    if (given(sub, "--moe-ffn-hidden-size") || !named_moe) m.moe.ffn_hidden = a.moe_ffn_hidden;
    if (given(sub, "--moe-layer-freq") || !named_moe) m.moe_layer_freq = a.moe_layer_freq;
  } else {
    for (const char* o : {"--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq", flag(LayoutKey::ep)})
      if (given(sub, o)) throw InputError(std::string(o) + " is given but the model has no experts (--num-experts)");
  }
  validate_gpt_config(m);
  return m;
}


json model_plan(const CLI::App& sub, const MemoryArgs& a) {
  if (given(sub, "--largest-layer-params") || given(sub, "--gpus-per-node"))
    throw InputError("--largest-layer-params and --gpus-per-node go with --params (DeepSpeed's estimators)");
  for (auto [opt, v] : {std::pair{flag(LayoutKey::tp), a.tp}, std::pair{flag(LayoutKey::pp), a.pp},
                        std::pair{flag(LayoutKey::dp), a.dp}, std::pair{flag(LayoutKey::virtual_stages), a.virtual_stages},
                        std::pair{flag(LayoutKey::cp), a.cp}})
    positive(sub, opt, v);
  if (given(sub, flag(LayoutKey::cp_comm_type)) && a.cp == 1)
    throw InputError(std::string(flag(LayoutKey::cp_comm_type)) + " goes with " + flag(LayoutKey::cp) + " > 1");
  positive(sub, flag(LayoutKey::micro_batches), a.micro_batches, 1, kMaxPlanMicroBatchSize);
  positive(sub, "--micro-batch-size", a.micro_batch_size, 1, kMaxPlanMicroBatchSize);
  json notes = json::array();
  std::string name;
  PlanConfig c;
  c.model = resolve_model(sub, a, &name, &notes);
  if (c.model.moe.num_experts > 0) {
    for (const char* o : {flag(LayoutKey::schedule), flag(LayoutKey::virtual_stages), flag(LayoutKey::micro_batches),
                          "--micro-batch-size", flag(LayoutKey::recompute), "--seq", flag(LayoutKey::sequence_parallel),
                          flag(LayoutKey::pipeline_layers), flag(LayoutKey::cp), flag(LayoutKey::cp_comm_type), "--attention"})
      if (given(sub, o))
        throw InputError(std::string(o) + " does not apply to an MoE model's plan (model states only; its activations "
                         "are not planned yet)");
    return moe_plan_json(c.model, name, a, notes);
  }
  c.layout.tp = a.tp;
  c.layout.cp = a.cp;
  c.layout.cp_comm_type = a.cp_comm_type;
  c.layout.sequence_parallel = a.sequence_parallel;
  c.layout.pp = a.pp;
  c.layout.dp = a.dp;
  c.layout.schedule = a.schedule;
  c.layout.virtual_stages = a.virtual_stages;
  if (given(sub, flag(LayoutKey::pipeline_layers)))
    c.layout.pipeline_layers = parse_pipeline_layers(a.pipeline_layers);
  c.layout.micro_batches = a.micro_batches > 0 ? a.micro_batches : a.pp;
  if (a.micro_batches <= 0 && a.pp > 1)
    notes.push_back(fmt("%d micro-batches per step (default: pp, the fewest that fill the pipeline)", a.pp));
  c.micro_batch_size = a.micro_batch_size;
  // A named model's plan sequence where it has one (the Llama 3 models: 8192, their T being the
  // long-context phase's 131072), as `dtbench plan` takes it.
  const int named_seq = given(sub, "--model") ? find_named_model(a.model).plan_seq : 0;
  c.seq_len = given(sub, "--seq") ? a.seq : named_seq;
  if (named_seq > 0 && !given(sub, "--seq"))
    notes.push_back(fmt("sequence %d, the model's plan sequence (--seq to change it; its T is %d)", named_seq, c.model.T));
  c.zero.stage = a.zero_stage;
  c.zero.offload_optimizer = parse_offload(a.offload) == Offload::cpu;
  c.precision = parse_precision(a.precision);
  c.recompute = parse_recompute(a.recompute);
  c.attention = parse_attention_kernel(a.attention);
  validate_plan(c);
  const std::vector<RankPlan> stages = plan_stages(c);
  const GptConfig& m = c.model;
  const uint64_t total = gpt_num_params(m);

  json j;
  j["mode"] = "plan";
  j["model"] = {{"name", name}, {"arch", to_string(m.arch)}, {"L", m.L}, {"C", m.C}, {"NH", m.NH}, {"T", m.T},
                {"V", m.V}, {"params", total}};
  if (is_llama(m)) j["model"]["num_kv_heads"] = kv_heads(m), j["model"]["ffn_hidden_size"] = ffn_hidden(m);
  const ParallelLayout& l = c.layout;
  j["layout"] = {{kTp, l.tp}, {kCp, l.cp}, {kPp, l.pp}, {kDp, l.dp}, {"world", l.world()}, {kSp, l.sequence_parallel},
                 {"schedule", l.schedule},
                 {kVirtualStages, l.virtual_stages}, {kPipelineLayers, l.pipeline_layers},
                 {"micro_batches", l.micro_batches},
                 {"micro_batch_size", c.micro_batch_size}, {"seq_len", c.tokens()},
                 {"seq_len_per_rank", c.local_tokens()},
                 {"global_batch", c.global_batch()}, {kZeroStage, c.zero.stage},
                 {kOffload, to_string(offload_of(c.zero))}, {"precision", to_string(c.precision)},
                 {"recompute", to_string(c.recompute)}, {"attention", to_string(c.attention)}};
  if (l.cp > 1) j["layout"][kCpComm] = l.cp_comm_type;
  size_t busiest = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const RankPlan& r = stages[i];
    if (r.device_total() > stages[busiest].device_total()) busiest = i;
    j["stages"].push_back({{"pp_rank", r.pp_rank}, {"tp_rank", r.tp_rank}, {"params", r.N}, {"shard_params", r.S},
                           {"activation_sets", r.activation_sets},
                           {"activation_set_bytes", r.activation_set_bytes},
                           {"transient_workspace_bytes", r.transient_workspace_bytes},
                           {"cp_comm_buffer_bytes", r.cp_comm_buffer_bytes},
                           {"device_bytes", bytes_json(r.mem, Tier::device)},
                           {"host_bytes", bytes_json(r.mem, Tier::host)}});
  }
  const RankPlan& b = stages[busiest];
  j["busiest_stage"] = b.pp_rank;
  j["busiest_device_bytes"] = b.device_total();

  // Beside ours: Korthikanti's per-layer activations and Megatron's weight + optimizer, both written
  // for the GPT block (LayerNorm, 4h GELU MLP, multi-head attention, the whole sequence on a rank):
  // compared for GPT-2 without context parallelism only (gpt_formulas), said in a note otherwise.
  const double ours_layer = double(layer_activation_floats(c) * (c.precision == Precision::fp32 ? 4 : 2));
  const bool gpt_formulas = !is_llama(m) && l.cp == 1;
  const double kor = gpt_formulas ? korthikanti_layer_activation_bytes(m, c.tokens(), c.micro_batch_size, l.tp,
                                                                        c.recompute, l.sequence_parallel)
                                  : 0.0;
  const double meg = gpt_formulas ? megatron_weight_and_optimizer_bytes(m, l.tp, l.pp, l.dp, c.zero.stage >= 1) : 0.0;
  j["layer_activation_bytes"] = ours_layer;
  if (gpt_formulas) {
    j["korthikanti_layer_activation_bytes"] = kor;
    j["megatron_weight_and_optimizer_bytes"] = meg;
  } else {
    notes.push_back(std::string(is_llama(m) ? "Llama (RMSNorm, SwiGLU, grouped-query attention, untied head)"
                                            : "context parallelism (each rank's Tn / cp rows, the log-sum-exp kept "
                                              "in place of the attention matrix)") +
                    ": Korthikanti's activation formula and Megatron-LM's weight + optimizer formula are written for "
                    "the GPT block on whole sequences, so they are not compared here; the plan is the trainer's "
                    "own accounting");
  }

  j["rules_of_thumb"] = memory_rules_of_thumb(c, stages, b, ours_layer, kor, meg);

  if (c.precision != Precision::fp32)
    notes.push_back(std::string(to_string(c.precision)) +
                    " as the trainer stores it: parameters, gradients, activations and scratch in 2 bytes; LayerNorm "
                    "statistics, token losses, master weights and Adam moments in fp32");
  notes.push_back("comm_buffer (pipeline messages, ZeRO's gathered units and buckets) is transient and not planned");
  if (l.cp > 1)
    notes.push_back(fmt("context parallelism: each rank trains %d of the %d tokens of every sequence; ZeRO shards over "
                        "the DP x CP = %d ranks; the CP attention's K/V and dK/dV blocks (%s) take %s bytes of "
                        "comm_buffer at their peak, and its scratch (in workspace) %s",
                        c.local_tokens(), c.tokens(), l.dp * l.cp, l.cp_comm_type.c_str(),
                        commas(stages[0].cp_comm_buffer_bytes).c_str(),
                        commas(stages[0].transient_workspace_bytes).c_str()));
  j["notes"] = notes;
  return j;
}

std::string size_cell(double bytes, double unit) { return bytes == 0 ? "0" : fmt("%.2f", bytes / unit); }

}  // namespace

CLI::App* add_memory_subcommand(CLI::App& app, MemoryArgs& a) {
  std::string models;
  for (const NamedModel& m : named_models())
    models += fmt("\n  %-11s L%d C%d NH%d%s T%d V%d: %s parameters (%s)", m.name.c_str(), m.cfg.L, m.cfg.C, m.cfg.NH,
                  is_llama(m.cfg) ? fmt(" KV%d F%d", kv_heads(m.cfg), ffn_hidden(m.cfg)).c_str() : "", m.cfg.T, m.cfg.V,
                  commas(gpt_num_params(m.cfg)).c_str(), m.source.c_str());
  auto* s = app.add_subcommand("memory", "plan a configuration's per-rank memory without running it");
  s->footer("Named models (GPT-2 family: tied embedding, learned positions; llama3-*: RMSNorm, RoPE, grouped-query "
            "attention with KV heads, SwiGLU of width F, untied head; V padded to a multiple of 128 x tp when tp does "
            "not divide it):" + models +
            "\nThe plan is the trainer's own accounting (measured equal in the memory and precision suites' checks).");
  s->add_option("--model", a.model, "named model (see below)");
  s->add_option("--layers", a.layers, "L layers");
  s->add_option("--hidden", a.hidden, "C channels");
  s->add_option("--heads", a.heads, "NH attention heads");
  s->add_option("--vocab", a.vocab, "V vocabulary (default 50257)");
  s->add_option("--seq", a.seq, "sequence length Tn (default a named model's plan sequence, else its T; a custom model's T, default 1024)");
  s->add_option("--params", a.params, "P parameters: model states only, ZeRO paper and DeepSpeed (e.g. 7.5e9)");
  s->add_option("--largest-layer-params", a.largest_layer_params, "with --params: for DeepSpeed's ZeRO-3 estimate");
  s->add_option("--gpus-per-node", a.gpus_per_node, "with --params: for DeepSpeed's estimates (default gcd(dp, 8))");
  s->add_option(flag(LayoutKey::tp), a.tp, "tensor-parallel size (default 1)");
  s->add_option(flag(LayoutKey::pp), a.pp, "pipeline-parallel size (default 1)");
  s->add_option(flag(LayoutKey::dp), a.dp, "data-parallel size (default 1)");
  s->add_option(flag(LayoutKey::cp), a.cp,
                "context-parallel size (default 1): each rank trains seq / cp tokens of every sequence; 2 cp must "
                "divide --seq");
  s->add_option(flag(LayoutKey::cp_comm_type), a.cp_comm_type, "with --cp: p2p (a ring, default) or all_gather");
  s->add_option("--arch", a.arch, "with the shape: gpt2 (default) or llama (RMSNorm, RoPE, GQA, SwiGLU, untied head)");
  s->add_option("--kv-heads", a.kv_heads, "with --arch llama: key/value heads (num_kv_heads; default NH)");
  s->add_option("--ffn-hidden", a.ffn_hidden,
                "with --arch llama: the SwiGLU MLP's hidden size (ffn_hidden_size; default 8C/3 rounded up to 256)");
  s->add_option(flag(LayoutKey::virtual_stages), a.virtual_stages, "model chunks per pipeline rank (interleaved; default 1)");
  s->add_option(flag(LayoutKey::schedule), a.schedule, "gpipe, 1f1b, interleaved or zb-h1 (default 1f1b)");
  s->add_option(flag(LayoutKey::micro_batches), a.micro_batches, "micro-batches per step and DP rank (default pp)");
  s->add_option("--micro-batch-size", a.micro_batch_size, "sequences per micro-batch (default 1)");
  s->add_option(flag(LayoutKey::zero_stage), a.zero_stage, "ZeRO stage 0-3 (default 0)");
  s->add_option(flag(LayoutKey::offload), a.offload, "none or cpu (ZeRO stages 1-3)");
  s->add_option(flag(LayoutKey::precision), a.precision, "fp32, bf16 or fp16 (default fp32)");
  s->add_option(flag(LayoutKey::recompute), a.recompute, "none, full or selective (default none)");
  s->add_option("--attention", a.attention, "materialized (the reference trainer's T x T probabilities, default) or fused "
                "(a GPU's fused kernel: the log-sum-exp only; docs/memory.md)");
  s->add_option(flag(LayoutKey::pipeline_layers), a.pipeline_layers,
                "layers per virtual stage, e.g. 1+3+3+1 (default: L / (pp v) each)");
  s->add_flag(flag(LayoutKey::sequence_parallel), a.sequence_parallel,
              "sequence parallelism with --tp > 1: the LayerNorm and residual regions split over TP");
  s->add_option("--num-experts", a.num_experts, "experts per MoE layer (docs/moe.md; default 0: dense)");
  s->add_option("--moe-router-topk", a.moe_topk, "experts per token (default 2)");
  s->add_option("--moe-ffn-hidden-size", a.moe_ffn_hidden, "each expert's hidden size (default 4C)");
  s->add_option("--moe-layer-freq", a.moe_layer_freq, "one MoE layer in every N (default 1)");
  s->add_option(flag(LayoutKey::ep), a.ep, "expert-parallel size: ranks an MoE layer's experts are split over (default 1)");
  s->add_flag("--json", a.json, "print the plan as JSON");
  return s;
}

json memory_plan_json(const CLI::App& sub, const MemoryArgs& a) {
  validate_zero_stage(a.zero_stage, flag(LayoutKey::zero_stage));  // named as the user gave it, as plan does
  return given(sub, "--params") ? params_plan(sub, a) : model_plan(sub, a);
}

std::string memory_plan_text(const json& j) {
  std::string o;
  if (j["mode"] == "params") {
    const double P = j["params"];
    o += fmt("dtbench memory: %s parameters, model states only (ZeRO paper's accounting), %s, DP %d\n",
             commas(uint64_t(std::llround(P))).c_str(), j["precision"].get<std::string>().c_str(), j[kDp].get<int>());
    const json& k = j["bytes_per_param"];
    o += fmt("bytes per parameter: param %g + grad %g + master_param %g + optimizer_state %g = %g\n\n",
             k["param"].get<double>(), k["grad"].get<double>(), k["master_param"].get<double>(),
             k["optimizer_state"].get<double>(), k["total"].get<double>());
    o += fmt("%-14s %10s %10s %13s %16s %12s %12s\n", "ZeRO stage", "param", "grad", "master_param", "optimizer_state",
             "total GB", "total GiB");
    for (const json& z : j["zero_stages"]) {
      const json& d = z["device_bytes"];
      const int st = z["stage"];
      o += fmt("%-14s %10.3g %10.3g %13.3g %16.3g %12.3g %12.3g%s\n",
               fmt("%d (%s)", st, z["name"].get<std::string>().c_str()).c_str(), d["param"].get<double>() / 1e9,
               d["grad"].get<double>() / 1e9, d["master_param"].get<double>() / 1e9,
               d["optimizer_state"].get<double>() / 1e9, d["total"].get<double>() / 1e9,
               d["total"].get<double>() / kGiB, st == j[kZeroStage].get<int>() ? "  <- --zero-stage" : "");
    }
    o += "(GB = 1e9 bytes per rank, as the paper; its Fig. 1, 7.5B parameters, 64 ranks, K = 12: 120, 31.4, 16.6, "
         "1.88 GB)\n";
    if (j.contains("offload")) {
      const json& f = j["offload"];
      o += fmt("with offload_optimizer cpu at stage %d: device %.3g GB (16-bit params and grads), host %.3g GB (fp32 "
               "master, Adam m, v and fp32 grads of the shard)\n",
               f["stage"].get<int>(), f["device_bytes"]["total"].get<double>() / 1e9,
               f["host_bytes"]["total"].get<double>() / 1e9);
    }
    const json& ds = j["deepspeed"];
    o += fmt("\nDeepSpeed's estimators (model states, GB = 2^30 bytes as DeepSpeed prints; %d node%s x %d GPUs):\n",
             ds["num_nodes"].get<int>(), ds["num_nodes"].get<int>() > 1 ? "s" : "", ds["gpus_per_node"].get<int>());
    o += "  per CPU  |  per GPU |   Options\n";
    for (const json& e : ds["zero2"])
      o += fmt(" %7.2fGB | %6.2fGB | ZeRO-2 offload_optimizer=%s%s\n", e["cpu_bytes"].get<double>() / kGiB,
               e["gpu_bytes"].get<double>() / kGiB, e[kOffload].get<std::string>().c_str(),
               e["legacy"].get<bool>() ? "  (the docs' formula, 4P + 16P/N, before DeepSpeed changed it to 2P + 18P/N)"
                                       : "");
    if (ds.contains("zero3")) {
      for (const json& e : ds["zero3"])
        o += fmt(" %7.2fGB | %6.2fGB | ZeRO-3 offload_param=%s, offload_optimizer=%s, zero_init=%d\n",
                 e["cpu_bytes"].get<double>() / kGiB, e["gpu_bytes"].get<double>() / kGiB,
                 e["offload_param"].get<std::string>().c_str(), e[kOffload].get<std::string>().c_str(),
                 e["zero_init"].get<bool>() ? 1 : 0);
    } else {
      o += "  (ZeRO-3 needs --largest-layer-params)\n";
    }
  } else if (j["mode"] == "moe") {
    o += moe_plan_text(j);
  } else {
    const json& m = j["model"];
    const json& l = j["layout"];
    const bool llama = m.value("arch", "gpt2") == "llama";
    o += fmt("dtbench memory: %s (%sL %d, C %d, NH %d%s, T %d, V %d): %s parameters\n",
             m["name"].get<std::string>().c_str(), llama ? "Llama, " : "", m["L"].get<int>(), m["C"].get<int>(),
             m["NH"].get<int>(),
             llama ? fmt(", KV %d, F %d", m["num_kv_heads"].get<int>(), m["ffn_hidden_size"].get<int>()).c_str() : "",
             m["T"].get<int>(), m["V"].get<int>(), commas(m["params"].get<uint64_t>()).c_str());
    const int cp = l.value(kCp, 1);
    o += fmt("layout: TP %d x %sPP %d x DP %d = %d ranks, %s%s, %d micro-batch%s of %d sequence%s x %d tokens per DP "
             "rank (global batch %lld)%s; ZeRO %d, offload_optimizer %s, %s, recompute %s%s\n",
             l[kTp].get<int>(), cp > 1 ? fmt("CP %d x ", cp).c_str() : "", l[kPp].get<int>(), l[kDp].get<int>(),
             l["world"].get<int>(),
             l["schedule"].get<std::string>().c_str(),
             (std::string(l[kVirtualStages].get<int>() > 1 ? fmt(" v %d", l[kVirtualStages].get<int>()) : "") +
              (l[kPipelineLayers].empty()
                   ? ""
                   : ", layers " + pipeline_layers_text(l[kPipelineLayers].get<std::vector<int>>())))
                 .c_str(),
             l["micro_batches"].get<int>(), l["micro_batches"].get<int>() == 1 ? "" : "es",
             l["micro_batch_size"].get<int>(), l["micro_batch_size"].get<int>() == 1 ? "" : "s", l["seq_len"].get<int>(),
             l["global_batch"].get<long long>(),
             cp > 1 ? fmt(", %d tokens a rank (CP %s)", l["seq_len_per_rank"].get<int>(),
                          l[kCpComm].get<std::string>().c_str()).c_str()
                    : "",
             l[kZeroStage].get<int>(), l[kOffload].get<std::string>().c_str(),
             l["precision"].get<std::string>().c_str(), l["recompute"].get<std::string>().c_str(),
             l.value("attention", "") == "fused" ? ", fused attention (log-sum-exp kept, no T x T probabilities)" : "");
    const double busiest = j["busiest_device_bytes"].get<double>();
    const bool gib = busiest >= kGiB;
    const double unit = gib ? kGiB : 1048576.0;
    const char* uname = gib ? "GiB (2^30 bytes)" : "MiB (2^20 bytes)";
    o += fmt("\nper-rank memory in %s, one row per pipeline stage (TP rank 0; every TP rank holds the same):\n", uname);
    o += fmt("%-5s %15s %-6s %9s %9s %12s %15s %10s %9s %9s  %s\n", "stage", "params", "tier", "param", "grad",
             "master_param", "optimizer_state", "activation", "workspace", "total", "sets in flight");
    bool host = false;
    for (const json& s : j["stages"]) host = host || s["host_bytes"]["total"].get<double>() > 0;
    for (const json& s : j["stages"]) {
      std::string sets;
      for (const auto& n : s["activation_sets"]) sets += (sets.empty() ? "" : "+") + std::to_string(n.get<int>());
      for (const char* tier : {"device", "host"}) {
        if (tier == std::string("host") && !host) continue;
        const json& b = s[std::string(tier) + "_bytes"];
        const bool dev = tier == std::string("device");
        o += fmt("%-5s %15s %-6s", dev ? std::to_string(s["pp_rank"].get<int>()).c_str() : "",
                 dev ? commas(s["params"].get<uint64_t>()).c_str() : "", tier);
        const int w[6] = {9, 9, 12, 15, 10, 9};
        for (size_t i = 0; i < 6; ++i) o += fmt(" %*s", w[i], size_cell(b[kCats[i]].get<double>(), unit).c_str());
        o += fmt(" %9s  %s\n", size_cell(b["total"].get<double>(), unit).c_str(), dev ? sets.c_str() : "");
      }
    }
    o += fmt("busiest rank: stage %d, %.2f GiB (%.2f GB) on the device\n", j["busiest_stage"].get<int>(),
             busiest / kGiB, busiest / 1e9);
  }
  o += "\nrules of thumb against this plan:\n";
  for (const json& r : j["rules_of_thumb"])
    o += fmt("  [%s] %s\n        %s\n", r["holds"].get<bool>() ? "holds" : "differs", r["rule"].get<std::string>().c_str(),
             r["plan"].get<std::string>().c_str());
  if (j.contains("notes") && !j["notes"].empty()) o += "notes:\n";
  if (j.contains("notes"))
    for (const json& n : j["notes"]) o += "  - " + n.get<std::string>() + "\n";
  return o;
}

int cmd_memory(const CLI::App& sub, const MemoryArgs& a, bool print) {
  const json j = memory_plan_json(sub, a);
  if (print) {
    if (a.json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::fputs(memory_plan_text(j).c_str(), stdout);
    }
  }
  return 0;
}

}  // namespace dtb
