// `dtbench plan --validate` (harness/plan_validate.h): the published set read strictly, each row
// predicted and planned, the comparisons judged, and the reports.
#include "harness/plan_validate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "harness/cli_text.h"
#include "harness/config.h"
#include "harness/hardware_file.h"
#include "harness/source_dir.h"
#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/analytic/planner.h"
#include "reference/analytic/stack_profile.h"
#include "reference/analytic/step_time_model.h"

namespace dtb {

using nlohmann::json;
using cli::fmt;

namespace {

constexpr double kGiB = 1073741824.0;
constexpr double kDerivedTolerance = 1e-3;  // a row's step_s against its conversion

// One JSON object being read: its dotted path and the file, for messages.
struct Reader {
  const json& o;
  std::string path, where;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(where + ": " + path + (key.empty() || path.empty() ? "" : ".") + key + ": " + what);
  }
  // Every required key present, no key outside required and optional (the nearest named).
  void keys(const std::vector<std::string>& required, const std::vector<std::string>& optional = {}) const {
    if (!o.is_object()) fail("", "must be an object");
    std::vector<std::string> all = required;
    all.insert(all.end(), optional.begin(), optional.end());
    for (auto it = o.begin(); it != o.end(); ++it)
      if (std::find(all.begin(), all.end(), it.key()) == all.end()) {
        const std::string near = nearest_name(it.key(), all);
        fail(it.key(), "unknown key" + (near.empty() ? std::string() : " (did you mean " + near + "?)"));
      }
    for (const std::string& k : required)
      if (!o.contains(k)) fail(k, "missing");
  }
  std::string str(const std::string& k) const {
    if (!o.at(k).is_string() || o.at(k).get<std::string>().empty()) fail(k, "must be a non-empty string");
    return o.at(k).get<std::string>();
  }
  int integer(const std::string& k, int lo = 1) const {
    const json& v = o.at(k);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > (1 << 24))
      fail(k, fmt("must be an integer in [%d, %d]", lo, 1 << 24));
    return int(v.get<int64_t>());
  }
  double positive(const std::string& k) const {
    const json& v = o.at(k);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) fail(k, "must be a number > 0");
    return v.get<double>();
  }
  Reader sub(const std::string& k) const { return {o.at(k), path + "." + k, where}; }
};

GptConfig read_model(const Reader& r, int seq) {
  r.keys({"L", "C", "NH", "V"});
  GptConfig m{r.integer("L"), r.integer("C"), r.integer("NH"), seq, r.integer("V")};
  try {
    validate_gpt_config(m);
  } catch (const InputError& e) {
    r.fail("", e.what());
  }
  return m;
}

LayoutSpec read_layout(const Reader& r, const std::string& text, int gpus, Precision p) {
  LayoutSpec s;
  try {
    s = parse_layout_spec(text, r.path + ".layout");
  } catch (const InputError& e) {
    r.fail("", e.what());
  }
  if (s.l.world() != gpus) r.fail("layout", fmt("'%s' spans %lld GPUs, not gpus %d", text.c_str(), (long long)s.l.world(), gpus));
  s.precision = p;
  return s;
}

// A hardware name or file, resolved now so that a typo names its entry.
void read_hardware(const Reader& r, const std::string& name) {
  try {
    resolve_hardware_file(name);
  } catch (const InputError& e) {
    r.fail("hardware", e.what());
  }
}

// The software measured: a stack profile's name (reference/analytic/stack_profile.h), whose
// overlap and attention kernel the row is priced under.
void read_stack(const Reader& r, const std::string& name) {
  try {
    find_stack_profile(name);
  } catch (const InputError& e) {
    r.fail("stack", e.what());
  }
}

Precision read_precision(const Reader& r) {
  try {
    return parse_precision(r.str("precision"));
  } catch (const InputError& e) {
    r.fail("precision", e.what());
  }
}

void check_batch(const Reader& r, const LayoutSpec& s, int global_batch, int b) {
  if (global_batch % (int64_t(s.l.dp) * b) != 0)
    r.fail("global_batch", fmt("%d is not divisible by dp %d x micro_batch_size %d", global_batch, s.l.dp, b));
}

ValidationRow read_row(const Reader& r) {
  r.keys({"id", "source", "stack", "hardware", "model", "seq_len", "gpus", "layout", "micro_batch_size", "global_batch",
          "precision", "published", "unit", "flop_convention", "step_s"},
         {"assumptions"});
  ValidationRow w;
  w.id = r.str("id"), w.source = r.str("source"), w.stack = r.str("stack"), w.hardware = r.str("hardware");
  read_stack(r, w.stack);
  read_hardware(r, w.hardware);
  w.seq_len = r.integer("seq_len"), w.gpus = r.integer("gpus");
  w.model = read_model(r.sub("model"), w.seq_len);
  w.layout_text = r.str("layout");
  w.layout = read_layout(r, w.layout_text, w.gpus, read_precision(r));
  w.micro_batch_size = r.integer("micro_batch_size"), w.global_batch = r.integer("global_batch");
  check_batch(r, w.layout, w.global_batch, w.micro_batch_size);
  w.published = r.positive("published");
  w.unit = r.str("unit"), w.flop_convention = r.str("flop_convention");
  if (r.o.contains("assumptions")) w.assumptions = r.str("assumptions");
  w.step_s = r.positive("step_s");
  double derived = 0;
  try {
    derived = published_step_s(w);
  } catch (const InputError& e) {
    r.fail("unit", e.what());
  }
  if (std::abs(w.step_s / derived - 1) > kDerivedTolerance)
    r.fail("step_s", fmt("%.6g is not the published %.6g %s converted (%.6g s)", w.step_s, w.published, w.unit.c_str(), derived));
  return w;
}

ValidationComparison read_comparison(const Reader& r, const std::map<std::string, const ValidationRow*>& rows) {
  if (!r.o.is_object() || !r.o.contains("kind")) r.fail("kind", "missing");
  ValidationComparison c;
  c.kind = r.str("kind");
  if (c.kind == "factor") {
    r.keys({"id", "kind", "source", "numerator", "denominator", "tolerance"}, {"assumptions"});
    c.numerator = r.str("numerator"), c.denominator = r.str("denominator");
    c.tolerance = r.positive("tolerance");
    if (c.tolerance > 1) r.fail("tolerance", fmt("must be in (0, 1], got %g", c.tolerance));
    for (const std::string& k : {std::string("numerator"), std::string("denominator")}) {
      auto it = rows.find(r.str(k));
      if (it == rows.end()) r.fail(k, "'" + r.str(k) + "' is no row of the set");
      if (it->second->flop_convention == "none") r.fail(k, "'" + r.str(k) + "' has no FLOP convention to compare throughputs in");
    }
  } else if (c.kind == "best") {
    r.keys({"id", "kind", "source", "stack", "hardware", "model", "seq_len", "gpus", "global_batch", "precision",
            "candidates", "winner"},
           {"assumptions"});
    c.hardware = r.str("hardware"), c.winner = r.str("winner"), c.stack = r.str("stack");
    read_stack(r, c.stack);
    read_hardware(r, c.hardware);
    c.seq_len = r.integer("seq_len"), c.gpus = r.integer("gpus"), c.global_batch = r.integer("global_batch");
    c.model = read_model(r.sub("model"), c.seq_len);
    const Precision p = read_precision(r);
    const Reader cands = r.sub("candidates");
    if (!cands.o.is_array() || cands.o.size() < 2) cands.fail("", "must be an array of 2 or more candidates");
    for (size_t i = 0; i < cands.o.size(); ++i) {
      const Reader cr{cands.o[i], cands.path + fmt("[%zu]", i), r.where};
      cr.keys({"label", "layout", "micro_batch_size"});
      ValidationCandidate v{cr.str("label"), cr.str("layout")};
      v.layout = read_layout(cr, v.layout_text, c.gpus, p);
      v.micro_batch_size = cr.integer("micro_batch_size");
      check_batch(cr, v.layout, c.global_batch, v.micro_batch_size);
      for (const ValidationCandidate& o : c.candidates)
        if (o.label == v.label) cr.fail("label", "'" + v.label + "' appears twice");
      c.candidates.push_back(std::move(v));
    }
    if (std::none_of(c.candidates.begin(), c.candidates.end(), [&](const auto& v) { return v.label == c.winner; }))
      r.fail("winner", "'" + c.winner + "' is none of the candidates' labels");
  } else {
    r.fail("kind", "'" + c.kind + "' is neither best nor factor");
  }
  c.id = r.str("id"), c.source = r.str("source");
  if (r.o.contains("assumptions")) c.assumptions = r.str("assumptions");
  return c;
}

// predict_step's input for a layout of `model` at this batch (the vocabulary padded as the
// planner pads it), and the memory model's.
StepTimeInput step_input(const GptConfig& model, const LayoutSpec& s, int seq, int global_batch, int b,
                         const StackProfile& stack, AttentionKernel hw_attention) {
  StepTimeInput in;
  in.overlap = stack.overlap;
  in.dropout = stack.dropout;
  in.main_grad_accumulation = stack.main_grad_accumulation;
  in.attention = plan_attention(std::nullopt, stack, hw_attention);
  in.model = model;
  in.model.V = padded_vocab(model.V, s.l.tp);
  in.layout = s.l;
  in.micro_batches = global_batch / (s.l.dp * b);
  in.layout.micro_batches = in.micro_batches;
  in.global_batch = global_batch, in.seq_len = seq;
  in.zero = s.z, in.recompute = s.recompute, in.precision = s.precision;
  return in;
}

const HardwareSpec& hardware(std::map<std::string, HardwareSpec>& cache, const std::string& name) {
  auto it = cache.find(name);
  if (it == cache.end()) {
    const std::string path = resolve_hardware_file(name);
    it = cache.emplace(name, load_hardware_file(path, name)).first;
  }
  return it->second;
}

double row_flops(const ValidationRow& w) {
  return narayanan_eq3_flops(w.global_batch, w.seq_len, w.model.L, w.model.C, w.model.V);
}

RowVerdict judge_row(const ValidationRow& w, const HardwareSpec& hw) {
  RowVerdict v;
  const StepTimeInput in = step_input(w.model, w.layout, w.seq_len, w.global_batch, w.micro_batch_size,
                                      find_stack_profile(w.stack), hw.attention_kernel);
  v.predicted_s = predict_step(in, hw.hw).step_s;
  v.error = v.predicted_s / w.step_s - 1;
  if (w.flop_convention != "none") v.predicted_tflops = row_flops(w) / (double(w.gpus) * v.predicted_s * 1e12);
  PlanConfig pc;
  pc.model = in.model, pc.layout = in.layout, pc.zero = in.zero, pc.precision = in.precision;
  pc.recompute = in.recompute, pc.seq_len = w.seq_len, pc.micro_batch_size = w.micro_batch_size;
  pc.attention = in.attention;
  v.device_memory_bytes = hw.device_memory_bytes;
  try {
    const RankPlan busiest = plan_busiest_rank(pc);
    v.device_bytes = double(busiest.device_total()) + double(busiest.cp_comm_buffer_bytes);
    v.memory_ok = v.device_bytes <= hw.device_memory_bytes;
  } catch (const InputError& e) {
    v.memory_refused = e.what();
  }
  return v;
}

}  // namespace

double narayanan_eq3_flops(double batch, double seq, double layers, double hidden, double vocab) {
  return 96 * batch * seq * layers * hidden * hidden * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden));
}

double published_step_s(const ValidationRow& r) {
  if (r.flop_convention == "narayanan2021_eq3" && r.unit == "tflops_per_gpu")
    return row_flops(r) / (double(r.gpus) * r.published * 1e12);
  if (r.flop_convention == "none" && r.unit == "s_per_iteration") return r.published;
  throw InputError("unit '" + r.unit + "' with flop_convention '" + r.flop_convention +
                   "': expected tflops_per_gpu with narayanan2021_eq3, or s_per_iteration with none");
}

ValidationSet validation_set_from_json(const json& j, const std::string& where) {
  const Reader top{j, "", where};
  top.keys({"description", "flop_conventions", "rows", "comparisons"});
  ValidationSet set;
  std::set<std::string> ids;
  for (const char* list : {"rows", "comparisons"})
    if (!j.at(list).is_array() || j.at(list).empty()) top.fail(list, "must be a non-empty array");
  for (size_t i = 0; i < j["rows"].size(); ++i) {
    set.rows.push_back(read_row({j["rows"][i], fmt("rows[%zu]", i), where}));
    if (!ids.insert(set.rows.back().id).second) top.fail(fmt("rows[%zu].id", i), "'" + set.rows.back().id + "' appears twice");
  }
  std::map<std::string, const ValidationRow*> by_id;
  for (const ValidationRow& w : set.rows) by_id[w.id] = &w;
  for (size_t i = 0; i < j["comparisons"].size(); ++i) {
    set.comparisons.push_back(read_comparison({j["comparisons"][i], fmt("comparisons[%zu]", i), where}, by_id));
    if (!ids.insert(set.comparisons.back().id).second)
      top.fail(fmt("comparisons[%zu].id", i), "'" + set.comparisons.back().id + "' appears twice");
  }
  return set;
}

ValidationSet load_validation_set(const std::string& path) {
  return validation_set_from_json(parse_json_input(read_input_file(path, "validation set", size_t(4) << 20), "validation set " + path),
                                  path);
}

ComparisonVerdict judge_comparison(const ValidationComparison& c, const std::vector<double>& step_s,
                                   const ValidationSet& set, const std::vector<RowVerdict>& rows) {
  ComparisonVerdict v;
  v.step_s = step_s;
  if (c.kind == "best") {
    size_t best = 0;
    for (size_t i = 1; i < step_s.size() && i < c.candidates.size(); ++i)
      if (step_s[i] < step_s[best]) best = i;
    if (!c.candidates.empty()) v.predicted_winner = c.candidates[best].label;
    v.agree = v.predicted_winner == c.winner;
    return v;
  }
  // Per-GPU throughput F / (gpus step), published and predicted, numerator over denominator.
  size_t n = 0, d = 0;
  for (size_t i = 0; i < set.rows.size(); ++i) {
    if (set.rows[i].id == c.numerator) n = i;
    if (set.rows[i].id == c.denominator) d = i;
  }
  const ValidationRow &rn = set.rows[n], &rd = set.rows[d];
  auto tput = [](const ValidationRow& w, double s) { return row_flops(w) / (double(w.gpus) * s); };
  v.published_factor = tput(rn, rn.step_s) / tput(rd, rd.step_s);
  if (n < rows.size() && d < rows.size())
    v.predicted_factor = tput(rn, rows[n].predicted_s) / tput(rd, rows[d].predicted_s);
  v.agree = std::abs(v.predicted_factor / v.published_factor - 1) <= c.tolerance;
  return v;
}

void summarize_errors(ValidationResult& r) {
  double sum = 0;
  r.max_abs_error = 0;
  std::vector<int> order;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    sum += std::abs(r.rows[i].error);
    r.max_abs_error = std::max(r.max_abs_error, std::abs(r.rows[i].error));
    order.push_back(int(i));
  }
  r.mape = r.rows.empty() ? 0 : sum / double(r.rows.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return std::abs(r.rows[a].error) > std::abs(r.rows[b].error); });
  order.resize(std::min<size_t>(order.size(), 3));
  r.worst = order;
}

ValidationResult evaluate_validation_set(const ValidationSet& set, bool rows_only) {
  std::map<std::string, HardwareSpec> cache;
  ValidationResult r;
  for (const ValidationRow& w : set.rows) r.rows.push_back(judge_row(w, hardware(cache, w.hardware)));
  summarize_errors(r);
  if (rows_only) return r;
  for (const ValidationComparison& c : set.comparisons) {
    std::vector<double> steps;
    for (const ValidationCandidate& v : c.candidates)
      steps.push_back(
          predict_step(step_input(c.model, v.layout, c.seq_len, c.global_batch, v.micro_batch_size,
                                  find_stack_profile(c.stack), hardware(cache, c.hardware).attention_kernel),
                       hardware(cache, c.hardware).hw)
              .step_s);
    r.comparisons.push_back(judge_comparison(c, steps, set, r.rows));
  }
  return r;
}

json validation_json(const ValidationSet& set, const ValidationResult& r, const std::string& file) {
  json j = {{"file", file}, {"mape", r.mape}, {"max_abs_error", r.max_abs_error}, {"rows", json::array()},
            {"worst", json::array()}, {"comparisons", json::array()}};
  for (size_t i = 0; i < set.rows.size() && i < r.rows.size(); ++i) {
    const ValidationRow& w = set.rows[i];
    const RowVerdict& v = r.rows[i];
    j["rows"].push_back({{"id", w.id}, {"source", w.source}, {"stack", w.stack}, {"hardware", w.hardware},
                         {"layout", w.layout_text}, {"gpus", w.gpus}, {"global_batch", w.global_batch},
                         {"micro_batch_size", w.micro_batch_size}, {"published", w.published}, {"unit", w.unit},
                         {"flop_convention", w.flop_convention}, {"step_s", w.step_s},
                         {"predicted_step_s", v.predicted_s}, {"error", v.error},
                         {"predicted_tflops_per_gpu", v.predicted_tflops}, {"device_bytes", v.device_bytes},
                         {"device_memory_bytes", v.device_memory_bytes}, {"memory_ok", v.memory_ok},
                         {"memory_refused", v.memory_refused}});
  }
  for (int i : r.worst) j["worst"].push_back({{"id", set.rows[i].id}, {"error", r.rows[i].error}});
  for (size_t i = 0; i < set.comparisons.size() && i < r.comparisons.size(); ++i) {
    const ValidationComparison& c = set.comparisons[i];
    const ComparisonVerdict& v = r.comparisons[i];
    json e = {{"id", c.id}, {"kind", c.kind}, {"source", c.source}, {"agree", v.agree}};
    if (c.kind == "best") {
      e["published_winner"] = c.winner, e["predicted_winner"] = v.predicted_winner;
      e["candidates"] = json::array();
      for (size_t k = 0; k < c.candidates.size(); ++k)
        e["candidates"].push_back({{"label", c.candidates[k].label}, {"layout", c.candidates[k].layout_text},
                                   {"micro_batch_size", c.candidates[k].micro_batch_size}, {"predicted_step_s", v.step_s[k]}});
    } else {
      e["numerator"] = c.numerator, e["denominator"] = c.denominator, e["tolerance"] = c.tolerance;
      e["published_factor"] = v.published_factor, e["predicted_factor"] = v.predicted_factor;
    }
    j["comparisons"].push_back(e);
  }
  return j;
}

std::string validation_text(const json& v) {
  std::string out = fmt("published set %s: %zu rows, %zu comparisons; step s per iteration (published: derived from "
                        "the figure in its FLOP convention), error = predicted / published - 1\n\n",
                        v["file"].get<std::string>().c_str(), v["rows"].size(), v["comparisons"].size());
  out += fmt("%-44s %-38s %9s %9s %8s %8s %9s %s\n", "row", "layout", "pub. s", "pred. s", "error", "pub. TF",
             "pred. TF", "memory (GiB)");
  for (const json& r : v["rows"]) {
    const bool tf = r["flop_convention"] != "none";
    const std::string mem = !r["memory_refused"].get<std::string>().empty()
                                ? "refused: " + r["memory_refused"].get<std::string>()
                                : fmt("%.1f of %.0f%s", r["device_bytes"].get<double>() / kGiB,
                                      r["device_memory_bytes"].get<double>() / kGiB, r["memory_ok"].get<bool>() ? "" : " DOES NOT FIT");
    out += fmt("%-44s %-38s %9.4g %9.4g %+7.1f%% %8s %9s %s\n", r["id"].get<std::string>().c_str(),
               r["layout"].get<std::string>().c_str(), r["step_s"].get<double>(), r["predicted_step_s"].get<double>(),
               100 * r["error"].get<double>(), tf ? fmt("%.0f", r["published"].get<double>()).c_str() : "-",
               tf ? fmt("%.1f", r["predicted_tflops_per_gpu"].get<double>()).c_str() : "-", mem.c_str());
  }
  out += fmt("\nMAPE %.1f %%, max |error| %.1f %% over %zu rows; worst:", 100 * v["mape"].get<double>(),
             100 * v["max_abs_error"].get<double>(), v["rows"].size());
  for (const json& w : v["worst"])
    out += fmt(" %s %+.1f %%;", w["id"].get<std::string>().c_str(), 100 * w["error"].get<double>());
  out += "\n\ncomparisons:\n";
  for (const json& c : v["comparisons"]) {
    if (c["kind"] == "best") {
      std::string steps;
      for (const json& k : c["candidates"])
        steps += fmt("%s%s %.4g s", steps.empty() ? "" : ", ", k["label"].get<std::string>().c_str(),
                     k["predicted_step_s"].get<double>());
      out += fmt("  %-8s %s: published best %s, predicted %s (%s)\n", c["agree"].get<bool>() ? "agree" : "DISAGREE",
                 c["id"].get<std::string>().c_str(), c["published_winner"].get<std::string>().c_str(),
                 c["predicted_winner"].get<std::string>().c_str(), steps.c_str());
    } else {
      out += fmt("  %-8s %s: published factor %.3g, predicted %.3g (within %.0f %%: %s)\n",
                 c["agree"].get<bool>() ? "agree" : "DISAGREE", c["id"].get<std::string>().c_str(),
                 c["published_factor"].get<double>(), c["predicted_factor"].get<double>(),
                 100 * c["tolerance"].get<double>(), c["agree"].get<bool>() ? "yes" : "no");
    }
  }
  return out;
}

json published_set_error() {
  const auto start = std::chrono::steady_clock::now();
  ValidationSet set;
  ValidationResult r;
  try {  // a plan is not refused for want of the set: its line says why it has no figure
    set = load_validation_set(std::string(source_dir()) + "/" + kPublishedSetFile);
    r = evaluate_validation_set(set, true);
  } catch (const InputError& e) {
    return {{"file", kPublishedSetFile}, {"unavailable", e.what()}};
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json e = {{"file", kPublishedSetFile}, {"rows", set.rows.size()}, {"mape", r.mape}, {"max_abs_error", r.max_abs_error},
            {"seconds", secs}};
  if (!r.worst.empty()) e["worst"] = {{"id", set.rows[r.worst[0]].id}, {"error", r.rows[r.worst[0]].error}};
  return e;
}

std::string published_set_error_text(const json& e) {
  if (e.contains("unavailable"))
    return fmt("step-time model error on the published set (%s): unavailable (%s)", e["file"].get<std::string>().c_str(),
               e["unavailable"].get<std::string>().c_str());
  return fmt("step-time model error on the published set (%s): MAPE %.1f %%, worst %+.0f %% (%s), %zu rows "
             "(dtbench plan --validate %s)",
             e["file"].get<std::string>().c_str(), 100 * e["mape"].get<double>(),
             100 * e["worst"]["error"].get<double>(), e["worst"]["id"].get<std::string>().c_str(),
             e["rows"].get<size_t>(), e["file"].get<std::string>().c_str());
}

}  // namespace dtb
