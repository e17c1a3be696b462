// `dtbench plan` (harness/plan_cli.h): the request from the options, the planner's candidates as
// JSON, and the text report.
#include "harness/plan_cli.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <CLI/CLI.hpp>

#include "harness/cli_text.h"
#include "harness/hardware_file.h"
#include "harness/memory_cli.h"
#include "harness/plan_validate.h"
#include "kernels/error.h"
#include "reference/analytic/plan_schedules.h"
#include "reference/analytic/planner.h"
#include "reference/analytic/stack_profile.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

using nlohmann::json;

namespace {

constexpr double kGiB = 1073741824.0;

using cli::flag;
using cli::fmt;
using cli::given;

// The model and its name: a named one (--seq at most its T; *named set), or the shape given.
GptConfig resolve_plan_model(const CLI::App& sub, const PlanArgs& a, std::string* name, const NamedModel** named) {
  const bool shape = given(sub, "--layers") || given(sub, "--hidden") || given(sub, "--heads") || given(sub, "--vocab");
  for (auto [opt, v] : {std::pair{"--layers", a.layers}, std::pair{"--hidden", a.hidden}, std::pair{"--heads", a.heads},
                        std::pair{"--vocab", a.vocab}, std::pair{"--seq", a.seq}})
    if (given(sub, opt) && v < 1) throw InputError(std::string(opt) + " must be >= 1, got " + std::to_string(v));
  GptConfig m;
  if (given(sub, "--model")) {
    if (shape) throw InputError("give --model NAME or the shape (--layers --hidden --heads --vocab), not both");
    const NamedModel& nm = find_named_model(a.model);
    m = nm.cfg;
    *name = nm.name;
    *named = &nm;
  } else {
    if (!given(sub, "--layers") || !given(sub, "--hidden") || !given(sub, "--heads"))
      throw InputError("give --model NAME, or --layers, --hidden and --heads (with --vocab, --seq)");
    m = GptConfig{a.layers, a.hidden, a.heads, given(sub, "--seq") ? a.seq : 1024, given(sub, "--vocab") ? a.vocab : 50257};
    *name = "custom";
  }
  validate_gpt_config(m);
  if (m.moe.num_experts > 0)
    throw InputError("plan: " + *name + " is an MoE model; the step-time model is dense only (docs/plan.md)");
  return m;
}

json terms_json(const PlanCandidate& c) {
  const StepTimeTerms& t = c.terms;
  const int m = c.input.micro_batches;
  return {{"forward_compute_s", t.forward_compute_s}, {"backward_compute_s", t.backward_compute_s},
          {"compute_s", m * (t.forward_compute_s + t.backward_compute_s)},
          {"tp_comm_s", t.tp_comm_s}, {"tp_comm_step_s", m * t.tp_comm_s}, {"cp_comm_s", t.cp_comm_s},
          {"cp_comm_step_s", m * t.cp_comm_s}, {"p2p_s", t.p2p_s},
          {"zero_mb_comm_s", t.zero_mb_comm_s}, {"pipeline_s", t.pipeline_s}, {"bubble", t.bubble},
          {"dp_comm_s", t.dp_comm_s}, {"dp_exposed_s", t.dp_exposed_s}, {"optimizer_s", t.optimizer_s},
          {"offload_s", t.offload_s}, {"scalars_s", t.scalars_s}, {"step_s", t.step_s}};
}

json candidate_json(const PlanCandidate& c) {
  const ParallelLayout& l = c.input.layout;
  auto f = [](LayoutKey k) { return field_key(k); };  // a record's field names
  json j = {{"layout", c.name()}, {f(LayoutKey::tp), l.tp}, {f(LayoutKey::cp), l.cp}, {f(LayoutKey::pp), l.pp},
            {f(LayoutKey::dp), l.dp}, {f(LayoutKey::pipeline_layers), l.pipeline_layers},
            {f(LayoutKey::sequence_parallel), l.sequence_parallel}, {"schedule", l.schedule},
            {f(LayoutKey::virtual_stages), l.virtual_stages},
            {f(LayoutKey::zero_stage), c.input.zero.stage},
            {"recompute", std::string(to_string(c.input.recompute))}, {"micro_batches", c.input.micro_batches},
            {"vocab_padded", c.input.model.V}, {"device_bytes", c.device_bytes}, {"feasible", c.feasible}};
  if (c.feasible) {
    j["step_s"] = c.terms.step_s;
    j["tokens_per_s"] = c.tokens_per_s;
    j["mfu"] = c.mfu;
    j["terms"] = terms_json(c);
  } else {
    j["rejected"] = c.rejected;
  }
  return j;
}

// Where a published layout ranks among the plan's candidates: the best-ranked feasible candidate
// of its tp, cp, pp and dp (any ZeRO stage, recompute and sequence parallelism: the paper gives
// the sizes), its rank among the feasible ones (1-based), predicted step and MFU beside the
// published MFU; or, when none of its candidates is feasible, the first one's reason. The
// published batch per DP rank is compared with the request's.
json published_json(const PublishedLayout& pl, const PlanRequest& r, const std::vector<PlanCandidate>& all) {
  json j = {{field_key(LayoutKey::tp), pl.tp}, {field_key(LayoutKey::cp), pl.cp}, {field_key(LayoutKey::pp), pl.pp},
            {field_key(LayoutKey::dp), pl.dp}, {"seq_len", pl.seq_len},
            {"seqs_per_dp", pl.seqs_per_dp}, {"published_mfu", pl.mfu}, {"source", pl.source},
            {"layout", fmt("TP%dxCP%dxPP%dxDP%d", pl.tp, pl.cp, pl.pp, pl.dp)},
            {"batch_matches", int64_t(pl.seqs_per_dp) * pl.dp == r.global_batch}};
  int rank = 0, feasible = 0;
  const PlanCandidate* best = nullptr;
  const PlanCandidate* first = nullptr;
  for (const PlanCandidate& c : all) {
    const ParallelLayout& l = c.input.layout;
    const bool same = l.tp == pl.tp && l.cp == pl.cp && l.pp == pl.pp && l.dp == pl.dp;
    if (c.feasible) ++feasible;
    if (!same) continue;
    if (!first) first = &c;
    if (c.feasible && !best) best = &c, rank = feasible;
  }
  j["feasible_layouts"] = std::count_if(all.begin(), all.end(), [](const PlanCandidate& c) { return c.feasible; });
  if (best) {
    j["rank"] = rank;
    j["candidate"] = best->name();
    j["step_s"] = best->terms.step_s;
    j["mfu"] = best->mfu;
  } else {
    j["rank"] = 0;
    j["candidate"] = first ? first->name() : "";
    j["rejected"] = first ? first->rejected : "not a candidate (the enumeration does not reach it)";
  }
  return j;
}

}  // namespace

CLI::App* add_plan_subcommand(CLI::App& app, PlanArgs& a) {
  auto* s = app.add_subcommand("plan", "rank every layout of a model on N GPUs of a named system by predicted step "
                                       "time, with memory per GPU and MFU (models; nothing runs)");
  s->footer("Hardware files: harness/hardware/*.json (a100-40gb, a100-80gb, h100-sxm, h200-sxm), each figure with its "
            "source; docs/plan.md. Named models: as `dtbench memory --help`.");
  s->add_option("--model", a.model, "named model (gpt2-124m, 1b, 3b, 10b, gpt3-175b, llama3-8b, llama3-70b, llama3-405b)");
  s->add_option("--layers", a.layers, "L layers");
  s->add_option("--hidden", a.hidden, "C channels");
  s->add_option("--heads", a.heads, "NH attention heads");
  s->add_option("--vocab", a.vocab, "V vocabulary (default 50257)");
  s->add_option("--seq", a.seq,
                "sequence length (default: a named model's plan sequence, 8192 for llama3-*, else its T; a custom "
                "model's T, default 1024)");
  s->add_option("--gpus", a.gpus, "N GPUs: every layout tp x cp x pp x dp = N (required, but for --calibrate alone)");
  s->add_option("--hardware", a.hardware, "a hardware file, or a name in harness/hardware (a100-40gb, ...)");
  s->add_option("--calibrate", a.calibrate,
                "measure this machine over the ranks of the run (mpirun -np N) and write its hardware file to FILE; "
                "with --gpus, then plan on it")
      ->type_name("FILE");
  s->add_option("--global-batch", a.global_batch,
                "sequences per step (default GPT-3's batch for the model's size, rounded up to a multiple of "
                "N x micro-batch size)");
  s->add_option("--micro-batch-size", a.micro_batch_size, "sequences per micro-batch (default 1)");
  s->add_option(flag(LayoutKey::precision), a.precision, "fp32, bf16 or fp16 (default bf16)");
  s->add_option("--attention", a.attention,
                "materialized or fused attention, in memory and time (default: the hardware file's attention_kernel)");
  s->add_option(flag(LayoutKey::tp), a.tp, "fix the tensor-parallel size");
  s->add_option(flag(LayoutKey::pp), a.pp, "fix the pipeline-parallel size");
  s->add_option(flag(LayoutKey::dp), a.dp, "fix the data-parallel size");
  s->add_option(flag(LayoutKey::cp), a.cp, "fix the context-parallel size (free: enumerated for llama3-* models, 1 otherwise)");
  s->add_option(flag(LayoutKey::zero_stage), a.zero_stage, "fix the ZeRO stage (0-3)");
  std::string stacks;
  for (const StackProfile& p : stack_profiles()) stacks += (stacks.empty() ? "" : ", ") + p.name;
  s->add_option("--stack", a.stack,
                "the training stack the step is priced as (its communication overlap, attention kernel, dropout "
                "and gradient accumulation): " + stacks + " (default dtbench: the reference trainer; docs/plan.md)");
  s->add_option("--schedules", a.schedules,
                fmt("all (the default: 1f1b, and at pp > 1 zb-h1 and interleaved at each v <= %d that splits the "
                    "layers evenly) or 1f1b (the reference trainer's default schedule alone)",
                    kMaxPlanVirtualStages));
  s->add_option("--top", a.top, "feasible layouts to print (default 10)");
  s->add_option("--validate", a.validate,
                "judge the step-time model against a published set (harness/plan_validation.json): predicted "
                "against published per row, MAPE, worst rows, the papers' comparisons")
      ->type_name("FILE");
  s->add_flag("--json", a.json, "print the plan as JSON");
  return s;
}

json plan_json(const CLI::App& sub, const PlanArgs& a) {
  if (a.top < 1) throw InputError("--top must be >= 1, got " + std::to_string(a.top));
  std::string name;
  const NamedModel* named = nullptr;
  PlanRequest r;
  r.model = resolve_plan_model(sub, a, &name, &named);
  r.seq_len = given(sub, "--seq") ? a.seq : named ? named->plan_seq : 0;
  r.gpus = a.gpus;
  r.micro_batch_size = a.micro_batch_size;
  r.precision = parse_precision(a.precision);
  if (given(sub, "--attention")) r.attention = parse_attention_kernel(a.attention);
  for (auto [opt, v] : {std::pair{flag(LayoutKey::tp), a.tp}, std::pair{flag(LayoutKey::pp), a.pp},
                        std::pair{flag(LayoutKey::dp), a.dp}, std::pair{flag(LayoutKey::cp), a.cp}})
    if (given(sub, opt) && v < 1) throw InputError(std::string(opt) + " must be >= 1, got " + std::to_string(v));
  if (given(sub, flag(LayoutKey::zero_stage))) validate_zero_stage(a.zero_stage, flag(LayoutKey::zero_stage));
  r.tp = a.tp, r.pp = a.pp, r.dp = a.dp, r.cp = a.cp, r.zero_stage = a.zero_stage;
  const StackProfile& stack = find_stack_profile(a.stack);
  r.overlap = stack.overlap;
  r.dropout = stack.dropout;
  r.main_grad_accumulation = stack.main_grad_accumulation;
  if (a.schedules != "all" && a.schedules != "1f1b")
    throw InputError("--schedules " + printable(a.schedules, 40) + ": expected all or 1f1b");
  r.only_1f1b = a.schedules == "1f1b";
  json notes = json::array();
  if (named && named->plan_seq > 0 && !given(sub, "--seq"))
    notes.push_back(fmt("sequence %d tokens (%s's plan sequence; its T %d is the longest it takes: --seq)", r.tokens(),
                        name.c_str(), r.model.T));
  // The default global batch is computed before validate_plan_request sees the request: its
  // operands' bounds first.
  if (r.micro_batch_size < 1 || r.micro_batch_size > kMaxPlanMicroBatchSize)
    throw InputError(fmt("--micro-batch-size must be in [1, %d], got %d", kMaxPlanMicroBatchSize, r.micro_batch_size));
  if (named && named->plan_batch_tokens > 0 && !given(sub, "--global-batch")) {
    // The published batch in tokens, as sequences of this length (at least one), rounded up to
    // a multiple of the micro-batch size; the layouts whose dp it does not divide are rejected.
    const int64_t seqs = std::max<int64_t>(1, (named->plan_batch_tokens + r.tokens() - 1) / std::max(1, r.tokens()));
    if (seqs > kMaxPlanGlobalBatch)
      throw InputError(fmt("%s's default batch of %lld tokens is %lld sequences of %d, more than a global batch may be "
                           "(%d): give --global-batch",
                           name.c_str(), (long long)named->plan_batch_tokens, (long long)seqs, r.tokens(),
                           kMaxPlanGlobalBatch));
    r.global_batch = int((seqs + r.micro_batch_size - 1) / r.micro_batch_size * r.micro_batch_size);
    notes.push_back(fmt("global batch %d sequences (default: %s's batch of %lld tokens: %s)", r.global_batch,
                        name.c_str(), (long long)named->plan_batch_tokens, named->plan_batch_source.c_str()));
  } else if (r.gpus >= 1 && r.gpus <= kMaxPlanGpus && !given(sub, "--global-batch")) {
    if (int64_t(r.gpus) * r.micro_batch_size > kMaxPlanGlobalBatch)
      throw InputError(fmt("--gpus x --micro-batch-size = %lld sequences is more than a global batch may be (%d)",
                           (long long)(int64_t(r.gpus) * r.micro_batch_size), kMaxPlanGlobalBatch));
    r.global_batch = default_global_batch(r.model, r.tokens(), r.gpus, r.micro_batch_size);
    notes.push_back(fmt("global batch %d sequences (default: GPT-3's batch for a model of this size, Brown et al. 2020 "
                        "Table 2.1, rounded up to a multiple of N x micro-batch size so that every dp divides it)",
                        r.global_batch));
  } else {
    r.global_batch = a.global_batch;
  }
  validate_plan_request(r);
  const std::string path = resolve_hardware_file(a.hardware);
  const std::string where = path == a.hardware ? path : std::filesystem::path(path).filename().string();
  const HardwareSpec hw = load_hardware_file(path, where);
  r.attention = plan_attention(given(sub, "--attention") ? std::optional(r.attention) : std::nullopt, stack,
                               hw.attention_kernel);
  if (r.attention == AttentionKernel::fused && !hw.hw.shape)
    throw InputError(where + " has no shape model (sm_count, gemm_tiles, gemm_fraction, l2_gb_per_s, fused_attention): "
                     "fused attention (--attention, or --stack " + stack.name + ") cannot be priced on it");
  const bool multi_node = hw.hw.ranks_per_node > 0 && r.gpus > hw.hw.ranks_per_node;
  bool inter = false;
  for (const CollectiveFit& f : hw.hw.collectives) inter = inter || f.link == LinkClass::inter_node;
  if (!inter && multi_node)
    throw InputError(fmt("%s has no inter-node collective fit: it plans one node of ranks_per_node = %d GPUs at most, "
                         "not --gpus %d",
                         where.c_str(), hw.hw.ranks_per_node, r.gpus));
  const std::vector<PlanCandidate> all = plan_layouts(r, hw.planner());
  if (all.empty())
    throw InputError(fmt("no layout of %s on %d GPUs: %s", name.c_str(), r.gpus, no_layout_reason(r).c_str()));
  if (!all.front().feasible) {
    const PlanCandidate* smallest = nullptr;
    for (const PlanCandidate& c : all)
      if (c.device_bytes > 0 && (!smallest || c.device_bytes < smallest->device_bytes)) smallest = &c;
    if (smallest)
      throw InputError(fmt("no layout of %s on %d GPUs fits %.1f GiB: the smallest needs %.1f GiB (%s)", name.c_str(),
                           r.gpus, hw.device_memory_bytes / kGiB, smallest->device_bytes / kGiB,
                           smallest->name().c_str()));
    throw InputError(fmt("no layout of %s on %d GPUs can run: %s (%s)", name.c_str(), r.gpus,
                         all.front().rejected.c_str(), all.front().name().c_str()));
  }
  std::map<int, int> pads;  // tp -> padded V
  for (const PlanCandidate& c : all) pads[c.input.layout.tp] = c.input.model.V;
  std::string padtext;
  for (auto [tp, v] : pads) padtext += fmt("%s%d at tp %d", padtext.empty() ? "" : ", ", v, tp);
  notes.push_back(fmt("vocabulary %d padded to a multiple of 128 x tp as Megatron-LM's --make-vocab-size-divisible-by "
                      "128 does: %s; MFU counts the unpadded model's FLOPs",
                      r.model.V, padtext.c_str()));
  // Groups larger than the file's largest collective fit on their link are priced with that fit
  // (reference/analytic/step_time_model.h collective_seconds): said, as an extrapolation.
  const LinkClass far = multi_node ? LinkClass::inter_node : LinkClass::intra_node;
  int largest_fit = 0;
  for (const CollectiveFit& f : hw.hw.collectives)
    if (f.link == far) largest_fit = std::max(largest_fit, f.group);
  if (largest_fit > 0 && r.gpus > largest_fit)  // the step's scalar all-reduces span every GPU
    notes.push_back(fmt("%s's %s all-reduce fits go up to %d ranks: groups of up to %d here (data-parallel groups, the "
                        "step's scalar reductions) are priced with that fit's latency and bus bandwidth, an "
                        "extrapolation",
                        where.c_str(), multi_node ? "inter-node" : "intra-node", largest_fit, r.gpus));

  json j;
  const GptConfig& m = r.model;
  j["model"] = {{"name", name}, {"arch", is_llama(m) ? "llama" : "gpt2"}, {"L", m.L}, {"C", m.C}, {"NH", m.NH},
                {"KV", kv_heads(m)}, {"F", is_llama(m) ? ffn_hidden(m) : 4 * m.C}, {"T", m.T}, {"V", m.V},
                {"params", gpt_num_params(m)}, {"flops_per_token", model_flops_per_token(m, r.tokens())}};
  j["hardware"] = {{"name", hw.name}, {"file", where}, {"device_memory_bytes", hw.device_memory_bytes},
                   {"ranks_per_node", hw.hw.ranks_per_node}, {"peak_flops", hw.peak_flops[size_t(r.precision)]}};
  j["request"] = {{"gpus", r.gpus}, {"global_batch", r.global_batch}, {"micro_batch_size", r.micro_batch_size},
                  {"seq_len", r.tokens()}, {"precision", std::string(to_string(r.precision))},
                  {"attention", std::string(to_string(r.attention))},
                  {"schedules", r.only_1f1b ? std::string("1f1b")
                                            : fmt("1f1b; at pp > 1 zb-h1 and interleaved at v 2-%d", kMaxPlanVirtualStages)}};
  const StepOverlap& o = r.overlap;
  j["stack"] = {{"name", stack.name}, {"overlap", overlap_text(o)}, {"dp_grad_reduce", o.dp_grad_reduce},
                {"bucket_params", o.bucket_params}, {"bucket_params_per_dp", o.bucket_params_per_dp},
                {"param_gather_prefetch", o.param_gather_prefetch}, {"prefetch_params", o.prefetch_params},
                {"gather_per_tensor", o.gather_per_tensor}, {"param_persistence_threshold", o.param_persistence_threshold},
                {"tp_comm_overlap", o.tp_comm},
                {"p2p_overlap", o.pp_send}, {"p2p_scatter_gather", o.pp_scatter_gather}, {"source", stack.source}};
  int feasible = 0;
  j["layouts"] = json::array();
  for (const PlanCandidate& c : all)
    if (c.feasible && feasible++ < a.top) j["layouts"].push_back(candidate_json(c));
  j["candidates"] = all.size();
  j["feasible"] = feasible;
  std::map<std::string, json> groups;  // kind -> {count, example}; the first of a kind is its smallest
  std::vector<std::string> order;
  for (const PlanCandidate& c : all) {
    if (c.feasible) continue;
    auto [it, fresh] = groups.try_emplace(c.rejected_kind, json{{"reason", c.rejected_kind}, {"count", 0}});
    if (fresh) {
      order.push_back(c.rejected_kind);
      it->second["example"] = c.name() + ": " + c.rejected;
    }
    it->second["count"] = it->second["count"].get<int>() + 1;
  }
  j["rejections"] = json::array();
  for (const std::string& k : order) j["rejections"].push_back(groups[k]);
  j["published"] = json::array();
  if (named)
    for (const PublishedLayout& pl : named->published)
      if (pl.gpus == r.gpus && pl.seq_len == r.tokens()) j["published"].push_back(published_json(pl, r, all));
  j["notes"] = notes;
  j["model_error"] = published_set_error();  // the model's error on the shipped set, computed now
  return j;
}

std::string plan_text(const json& p) {
  const json& m = p["model"];
  const json& h = p["hardware"];
  const json& r = p["request"];
  std::string out;
  const bool llama = m["arch"] == "llama";
  out += fmt("model     %s: L%d C%d NH%d%s T%d V%d, %s parameters, %.3g GFLOP per token\n",
             m["name"].get<std::string>().c_str(), m["L"].get<int>(), m["C"].get<int>(), m["NH"].get<int>(),
             llama ? fmt(" KV%d F%d", m["KV"].get<int>(), m["F"].get<int>()).c_str() : "", m["T"].get<int>(),
             m["V"].get<int>(), commas(m["params"].get<uint64_t>()).c_str(), m["flops_per_token"].get<double>() / 1e9);
  out += fmt("hardware  %d x %s (%s): %.1f GiB per GPU, %d GPUs per node, peak %.3g TFLOP/s %s\n", r["gpus"].get<int>(),
             h["name"].get<std::string>().c_str(), h["file"].get<std::string>().c_str(),
             h["device_memory_bytes"].get<double>() / kGiB, h["ranks_per_node"].get<int>(),
             h["peak_flops"].get<double>() / 1e12, r["precision"].get<std::string>().c_str());
  out += fmt("batch     %d sequences x %d tokens, micro-batch size %d, schedules %s, %s attention\n",
             r["global_batch"].get<int>(), r["seq_len"].get<int>(), r["micro_batch_size"].get<int>(),
             r["schedules"].get<std::string>().c_str(), r["attention"].get<std::string>().c_str());
  out += fmt("stack     %s: overlap %s\n", p["stack"]["name"].get<std::string>().c_str(),
             p["stack"]["overlap"].get<std::string>().c_str());
  out += fmt("layouts   %d feasible of %zu candidates; the best %zu by predicted step time:\n\n", p["feasible"].get<int>(),
             p["candidates"].get<size_t>(), p["layouts"].size());
  // The widest layout name sets the first column (an uneven split's names are long).
  int w = 30;
  for (const json& c : p["layouts"]) w = std::max(w, int(c["layout"].get<std::string>().size()));
  out += fmt("%-*s %5s %8s %9s %11s %6s %9s %7s %9s %9s%s\n", w, "layout", "m", "GiB/GPU", "step s", "tokens/s", "MFU",
             "compute s", "bubble", "TP comm s", "DP exp. s", llama ? " CP comm s" : "");
  // Seconds to 4 significant digits: 85.67 on a cluster, 0.004512 for a calibrated small model.
  for (const json& c : p["layouts"]) {
    const json& t = c["terms"];
    out += fmt("%-*s %5d %8.3g %9.4g %11.0f %5.1f%% %9.4g %6.1f%% %9.4g %9.4g%s\n", w,
               c["layout"].get<std::string>().c_str(), c["micro_batches"].get<int>(),
               c["device_bytes"].get<double>() / kGiB, c["step_s"].get<double>(), c["tokens_per_s"].get<double>(),
               100 * c["mfu"].get<double>(), t["compute_s"].get<double>(), 100 * t["bubble"].get<double>(),
               t["tp_comm_step_s"].get<double>(), t["dp_exposed_s"].get<double>(),
               llama ? fmt(" %9.4g", t["cp_comm_step_s"].get<double>()).c_str() : "");
  }
  if (!p["published"].empty()) out += "\npublished layouts of this model at this size and sequence:\n";
  for (const json& q : p["published"]) {
    if (q["rank"].get<int>() > 0)
      out += fmt("  %s (%s): ranks #%d of %d feasible, as %s: predicted %.4g s, MFU %.1f%% vs published %.0f%%%s\n",
                 q["layout"].get<std::string>().c_str(), q["source"].get<std::string>().c_str(), q["rank"].get<int>(),
                 q["feasible_layouts"].get<int>(), q["candidate"].get<std::string>().c_str(), q["step_s"].get<double>(),
                 100 * q["mfu"].get<double>(), 100 * q["published_mfu"].get<double>(),
                 q["batch_matches"].get<bool>() ? "" : fmt(" (published at %d sequences per DP rank; this batch differs)",
                                                           q["seqs_per_dp"].get<int>()).c_str());
    else
      out += fmt("  %s (%s): not feasible here: %s%s%s\n", q["layout"].get<std::string>().c_str(),
                 q["source"].get<std::string>().c_str(), q["candidate"].get<std::string>().c_str(),
                 q["candidate"].get<std::string>().empty() ? "" : ": ", q["rejected"].get<std::string>().c_str());
  }
  if (!p["rejections"].empty()) out += "\nrejected:\n";
  for (const json& g : p["rejections"])
    out += fmt("  %5d %s (e.g. %s)\n", g["count"].get<int>(), g["reason"].get<std::string>().c_str(),
               g["example"].get<std::string>().c_str());
  if (p.contains("model_error")) out += "\n" + published_set_error_text(p["model_error"]) + "\n";
  out += "\nnotes:\n";
  for (const json& n : p["notes"]) out += "  - " + n.get<std::string>() + "\n";
  out += "  - compute: the busiest stage's forward and backward over the step's m micro-batches; TP comm the same for "
         "its TP collectives; DP exp.: the DP gradient reduction not overlapped (docs/plan.md)\n";
  return out;
}

int cmd_plan(Communicator& world, const CLI::App& sub, const PlanArgs& args, bool print) {
  PlanArgs a = args;
  if (given(sub, "--validate")) {  // the set alone: a plan's option would be ignored
    for (const CLI::Option* o : sub.get_options())
      if (o->count() > 0 && o->get_name() != "--validate" && o->get_name() != "--json" && o->get_name() != "--help")
        throw InputError("--validate FILE takes no plan option (only --json), got " + o->get_name());
    if (a.validate.empty()) throw InputError("--validate is empty");
    const ValidationSet set = load_validation_set(a.validate);
    const json v = validation_json(set, evaluate_validation_set(set), a.validate);
    if (print) {
      if (a.json) std::printf("%s\n", v.dump(2).c_str());
      else std::fputs(validation_text(v).c_str(), stdout);
    }
    return 0;
  }
  if (given(sub, "--calibrate")) {
    if (a.calibrate.empty()) throw InputError("--calibrate is empty");
    if (given(sub, "--hardware")) throw InputError("give --hardware FILE or --calibrate FILE, not both");
    if (!given(sub, "--gpus"))  // calibrating alone plans nothing: a plan's option would be ignored
      for (const CLI::Option* o : sub.get_options())
        if (o->count() > 0 && o->get_name() != "--calibrate" && o->get_name() != "--json" && o->get_name() != "--help")
          throw InputError(o->get_name() + " plans: give --gpus N with it (--calibrate FILE alone only measures and "
                                           "writes the file)");
    // Rank 0 writes; every rank learns whether it could, before measuring and after, so that
    // an unwritable path ends the whole job with one line rather than leaving ranks waiting.
    auto agree = [&](const std::string& why) {
      double bad = why.empty() ? 0 : 1;
      world.all_reduce(&bad, &bad, 1, DType::f64, ReduceOp::max);
      if (bad > 0) throw InputError(why.empty() ? "plan --calibrate: rank 0 could not write " + a.calibrate : why);
    };
    std::string why;
    if (world.rank() == 0) {
      std::error_code ec;
      const bool existed = std::filesystem::exists(a.calibrate, ec);
      if (!std::ofstream(a.calibrate, std::ios::app)) why = "hardware file " + a.calibrate + ": cannot write";
      else if (!existed) std::filesystem::remove(a.calibrate, ec);
    }
    agree(why);
    const HardwareSpec hw = calibrate_hardware(world);
    if (world.rank() == 0) {
      try {
        write_hardware_file(a.calibrate, hw);
      } catch (const InputError& e) {
        why = e.what();
      }
      if (print && why.empty())  // on stderr under --json, which keeps stdout one document
        std::fprintf(a.json ? stderr : stdout, "# wrote %s: %s\n", a.calibrate.c_str(), hw.description.c_str());
    }
    agree(why);
    if (!given(sub, "--gpus")) return 0;
    a.hardware = a.calibrate;
  } else {
    if (!given(sub, "--gpus")) throw InputError("--gpus is required");
    if (!given(sub, "--hardware")) throw InputError("--hardware is required (or --calibrate FILE)");
  }
  const json j = plan_json(sub, a);
  if (print) {
    if (a.json) std::printf("%s\n", j.dump(2).c_str());
    else std::fputs(plan_text(j).c_str(), stdout);
  }
  return 0;
}

}  // namespace dtb
