// `dtbench plan` (harness/plan_cli.h): the request from the options, the planner's candidates as
// JSON, and the text report.
#include "harness/plan_cli.h"

#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "harness/cli_text.h"
#include "harness/hardware_file.h"
#include "harness/memory_cli.h"
#include "kernels/error.h"
#include "reference/analytic/planner.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

using nlohmann::json;

namespace {

constexpr double kGiB = 1073741824.0;

using cli::flag;
using cli::fmt;
using cli::given;

// The model and its name: a named one (--seq at most its T), or the shape given.
GptConfig resolve_plan_model(const CLI::App& sub, const PlanArgs& a, std::string* name) {
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
          {"tp_comm_s", t.tp_comm_s}, {"tp_comm_step_s", m * t.tp_comm_s}, {"p2p_s", t.p2p_s},
          {"zero_mb_comm_s", t.zero_mb_comm_s}, {"pipeline_s", t.pipeline_s}, {"bubble", t.bubble},
          {"dp_comm_s", t.dp_comm_s}, {"dp_exposed_s", t.dp_exposed_s}, {"optimizer_s", t.optimizer_s},
          {"offload_s", t.offload_s}, {"scalars_s", t.scalars_s}, {"step_s", t.step_s}};
}

json candidate_json(const PlanCandidate& c) {
  const ParallelLayout& l = c.input.layout;
  auto f = [](LayoutKey k) { return field_key(k); };  // a record's field names
  json j = {{"layout", c.name()}, {f(LayoutKey::tp), l.tp}, {f(LayoutKey::pp), l.pp}, {f(LayoutKey::dp), l.dp},
            {f(LayoutKey::sequence_parallel), l.sequence_parallel}, {"schedule", l.schedule},
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

}  // namespace

CLI::App* add_plan_subcommand(CLI::App& app, PlanArgs& a) {
  auto* s = app.add_subcommand("plan", "rank every layout of a model on N GPUs of a named system by predicted step "
                                       "time, with memory per GPU and MFU (models; nothing runs)");
  s->footer("Hardware files: harness/hardware/*.json (a100-40gb, a100-80gb, h100-sxm, h200-sxm), each figure with its "
            "source; docs/plan.md. Named models: as `dtbench memory --help`.");
  s->add_option("--model", a.model, "named model (gpt2-124m, 1b, 3b, 10b, gpt3-175b)");
  s->add_option("--layers", a.layers, "L layers");
  s->add_option("--hidden", a.hidden, "C channels");
  s->add_option("--heads", a.heads, "NH attention heads");
  s->add_option("--vocab", a.vocab, "V vocabulary (default 50257)");
  s->add_option("--seq", a.seq, "sequence length (default the model's T; a custom model's T, default 1024)");
  s->add_option("--gpus", a.gpus, "N GPUs: every layout tp x pp x dp = N (required, but for --calibrate alone)");
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
  s->add_option(flag(LayoutKey::tp), a.tp, "fix the tensor-parallel size");
  s->add_option(flag(LayoutKey::pp), a.pp, "fix the pipeline-parallel size");
  s->add_option(flag(LayoutKey::dp), a.dp, "fix the data-parallel size");
  s->add_option(flag(LayoutKey::zero_stage), a.zero_stage, "fix the ZeRO stage (0-3)");
  s->add_option("--top", a.top, "feasible layouts to print (default 10)");
  s->add_flag("--json", a.json, "print the plan as JSON");
  return s;
}

json plan_json(const CLI::App& sub, const PlanArgs& a) {
  if (a.top < 1) throw InputError("--top must be >= 1, got " + std::to_string(a.top));
  std::string name;
  PlanRequest r;
  r.model = resolve_plan_model(sub, a, &name);
  r.seq_len = given(sub, "--seq") ? a.seq : 0;
  r.gpus = a.gpus;
  r.micro_batch_size = a.micro_batch_size;
  r.precision = parse_precision(a.precision);
  for (auto [opt, v] : {std::pair{flag(LayoutKey::tp), a.tp}, std::pair{flag(LayoutKey::pp), a.pp},
                        std::pair{flag(LayoutKey::dp), a.dp}})
    if (given(sub, opt) && v < 1) throw InputError(std::string(opt) + " must be >= 1, got " + std::to_string(v));
  if (given(sub, flag(LayoutKey::zero_stage))) validate_zero_stage(a.zero_stage, flag(LayoutKey::zero_stage));
  r.tp = a.tp, r.pp = a.pp, r.dp = a.dp, r.zero_stage = a.zero_stage;
  json notes = json::array();
  // The default global batch is computed before validate_plan_request sees the request: its
  // operands' bounds first.
  if (r.micro_batch_size < 1 || r.micro_batch_size > kMaxPlanMicroBatchSize)
    throw InputError(fmt("--micro-batch-size must be in [1, %d], got %d", kMaxPlanMicroBatchSize, r.micro_batch_size));
  if (r.gpus >= 1 && r.gpus <= kMaxPlanGpus && !given(sub, "--global-batch")) {
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
  j["model"] = {{"name", name}, {"L", m.L}, {"C", m.C}, {"NH", m.NH}, {"T", m.T}, {"V", m.V},
                {"params", gpt_num_params(m)}, {"flops_per_token", model_flops_per_token(m, r.tokens())}};
  j["hardware"] = {{"name", hw.name}, {"file", where}, {"device_memory_bytes", hw.device_memory_bytes},
                   {"ranks_per_node", hw.hw.ranks_per_node}, {"peak_flops", hw.peak_flops[size_t(r.precision)]}};
  j["request"] = {{"gpus", r.gpus}, {"global_batch", r.global_batch}, {"micro_batch_size", r.micro_batch_size},
                  {"seq_len", r.tokens()}, {"precision", std::string(to_string(r.precision))}, {"schedule", "1f1b"}};
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
  j["notes"] = notes;
  return j;
}

std::string plan_text(const json& p) {
  const json& m = p["model"];
  const json& h = p["hardware"];
  const json& r = p["request"];
  std::string out;
  out += fmt("model     %s: L%d C%d NH%d T%d V%d, %s parameters, %.3g GFLOP per token\n",
             m["name"].get<std::string>().c_str(), m["L"].get<int>(), m["C"].get<int>(), m["NH"].get<int>(),
             m["T"].get<int>(), m["V"].get<int>(), commas(m["params"].get<uint64_t>()).c_str(),
             m["flops_per_token"].get<double>() / 1e9);
  out += fmt("hardware  %d x %s (%s): %.1f GiB per GPU, %d GPUs per node, peak %.3g TFLOP/s %s\n", r["gpus"].get<int>(),
             h["name"].get<std::string>().c_str(), h["file"].get<std::string>().c_str(),
             h["device_memory_bytes"].get<double>() / kGiB, h["ranks_per_node"].get<int>(),
             h["peak_flops"].get<double>() / 1e12, r["precision"].get<std::string>().c_str());
  out += fmt("batch     %d sequences x %d tokens, micro-batch size %d, schedule 1f1b\n", r["global_batch"].get<int>(),
             r["seq_len"].get<int>(), r["micro_batch_size"].get<int>());
  out += fmt("layouts   %d feasible of %zu candidates; the best %zu by predicted step time:\n\n", p["feasible"].get<int>(),
             p["candidates"].get<size_t>(), p["layouts"].size());
  out += fmt("%-30s %5s %8s %9s %11s %6s %9s %7s %9s %9s\n", "layout", "m", "GiB/GPU", "step s", "tokens/s", "MFU",
             "compute s", "bubble", "TP comm s", "DP exp. s");
  // Seconds to 4 significant digits: 85.67 on a cluster, 0.004512 for a calibrated small model.
  for (const json& c : p["layouts"]) {
    const json& t = c["terms"];
    out += fmt("%-30s %5d %8.3g %9.4g %11.0f %5.1f%% %9.4g %6.1f%% %9.4g %9.4g\n", c["layout"].get<std::string>().c_str(),
               c["micro_batches"].get<int>(), c["device_bytes"].get<double>() / kGiB, c["step_s"].get<double>(),
               c["tokens_per_s"].get<double>(), 100 * c["mfu"].get<double>(), t["compute_s"].get<double>(),
               100 * t["bubble"].get<double>(), t["tp_comm_step_s"].get<double>(), t["dp_exposed_s"].get<double>());
  }
  if (!p["rejections"].empty()) out += "\nrejected:\n";
  for (const json& g : p["rejections"])
    out += fmt("  %5d %s (e.g. %s)\n", g["count"].get<int>(), g["reason"].get<std::string>().c_str(),
               g["example"].get<std::string>().c_str());
  out += "\nnotes:\n";
  for (const json& n : p["notes"]) out += "  - " + n.get<std::string>() + "\n";
  out += "  - compute: the busiest stage's forward and backward over the step's m micro-batches; TP comm the same for "
         "its TP collectives; DP exp.: the DP gradient reduction not overlapped (docs/plan.md)\n";
  return out;
}

int cmd_plan(Communicator& world, const CLI::App& sub, const PlanArgs& args, bool print) {
  PlanArgs a = args;
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
