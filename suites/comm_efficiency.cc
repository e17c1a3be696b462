// The `comm_efficiency` suite: where each way of sending less between nodes wins. The GPT is
// trained with data parallelism over every rank, the ranks grouped into emulated nodes whose
// links out run at a given bandwidth (kernels/comm/emulated_link.h: collectives that cross
// nodes take at least the links' time), once with every node's links fast and once with one
// node's links slow. Each method — synchronous DP, the hierarchical all-reduce, stale
// gradients (k = 1, 2, with and without DC-ASGD's compensation) and local steps (DiLoCo) —
// is trained on the same data for the same steps under both. Per method and link: tokens/s
// (the slowest rank's step times), the bytes the DP group moved per token (the all-reduced
// buffers) and the bytes sent over the links out of a node per token (the busiest rank), and
// the loss at the end against synchronous DP's. Their correctness is the conformance suite's
// (docs/comm-efficiency.md); here, checks that the links change only the time: each
// method's losses are bitwise the same over fast and slow links, and its replicas end
// bitwise identical. When the ranks sit on several real nodes (hosts; not `--ranks-per-node`),
// nothing is emulated: the nodes are the real ones, each method is trained once over the links
// as they are (recorded as the "fast" condition, with the slowest link measured), and only the
// bytes crossing nodes are counted.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "kernels/comm/emulated_link.h"
#include "kernels/error.h"
#include "reference/layout/dp_sync_json.h"
#include "reference/layout/layout_spec.h"
#include "suites/memory_guard.h"
#include "suites/oracle.h"
#include "suites/stats.h"
#include "suites/suite.h"

namespace dtb {
namespace {

using nlohmann::json;

// One method: its name as configured and what it changes (the recipe, the DP all-reduce).
struct Method {
  std::string name;
  DpSync sync;
  bool hierarchical = false;
};

// "sync", "hierarchical", "staleK" with ":dc", "localH" (docs/comm-efficiency.md).
Method parse_method(const std::string& text, double lambda, double outer_lr, double outer_momentum) {
  Method m{text, {}, false};
  const std::string where = "comm_efficiency.methods: '" + printable(text, 40) + "'";
  auto number = [&](const std::string& digits, int lo) {
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(where + " is not sync, hierarchical, staleK[:dc] or localH");
    const int v = std::stoi(digits);
    if (v < lo) throw InputError(where + ": " + std::to_string(v) + " is below " + std::to_string(lo));
    return v;
  };
  if (text == "sync") return m;
  if (text == "hierarchical") {
    m.hierarchical = true;
    return m;
  }
  if (text.rfind("stale", 0) == 0) {
    const size_t colon = text.find(':');
    m.sync.staleness = number(text.substr(5, colon == std::string::npos ? std::string::npos : colon - 5), 1);
    if (colon != std::string::npos) {
      if (text.substr(colon) != ":dc") throw InputError(where + ": after staleK only ':dc' may follow");
      m.sync.delay_compensation = lambda;
    }
    return m;
  }
  if (text.rfind("local", 0) == 0) {
    m.sync.local_steps = number(text.substr(5), 1);
    m.sync.outer_lr = outer_lr;
    m.sync.outer_momentum = outer_momentum;
    return m;
  }
  throw InputError(where + " is not sync, hierarchical, staleK[:dc] or localH");
}

// The section, typed: the one parse validate() and run() use.
struct Params {
  GptConfig model;
  TrainConfig cfg;
  int ranks_per_node = 0;  // of the emulated nodes, or of the real ones
  bool real = false;       // the ranks are on several real nodes: their links, nothing emulated
  LinkModel fast, slow;    // the two link conditions
  std::vector<Method> methods;
  static Params parse(const json& s, const json& config, const WorldInfo& world) {
    Params p;
    p.model = gpt_config_from_json(s.at("model"), "comm_efficiency.model");
    require_gpt2(p.model, "comm_efficiency.model", "the comm_efficiency suite");
    p.cfg = train_config_from_json(s, config, "comm_efficiency");
    DpSync keys;  // the recipes' lambda and DiLoCo's outer step, read as every suite reads them
    dp_sync_from_json(s, "comm_efficiency", keys);
    const double lambda = keys.delay_compensation, olr = keys.outer_lr, mom = keys.outer_momentum;
    const json& list = s.at("methods");
    if (!list.is_array() || list.empty()) throw InputError("comm_efficiency.methods: a non-empty list of methods");
    for (const json& v : list) {
      if (!v.is_string()) throw InputError("comm_efficiency.methods: every entry must be a string, got " + v.dump());
      Method m = parse_method(v.get<std::string>(), lambda, olr, mom);
      for (const Method& o : p.methods)
        if (o.name == m.name) throw InputError("comm_efficiency.methods: '" + m.name + "' is listed twice");
      if (m.sync.local_steps > 0 && p.cfg.steps % m.sync.local_steps != 0)
        throw InputError("comm_efficiency.steps = " + std::to_string(p.cfg.steps) + " is not a multiple of " + m.name +
                         "'s " + std::to_string(m.sync.local_steps) + " local steps");
      p.methods.push_back(m);
    }
    if (p.methods.front().name != "sync")
      throw InputError("comm_efficiency.methods: the first must be sync (every other is compared with it)");
    p.fast.gbps = number_in_range(s, "link_gbps", "comm_efficiency.link_gbps", 1e-6, 1e6);
    p.fast.latency_s = number_in_range(s, "latency_us", "comm_efficiency.latency_us", 0.0, 1e6) * 1e-6;
    p.slow = p.fast;
    p.slow.slow_gbps = number_in_range(s, "slow_link_gbps", "comm_efficiency.slow_link_gbps", 1e-6, 1e6);
    p.ranks_per_node = int(int_in_range(s, "ranks_per_node", "comm_efficiency.ranks_per_node", 1, 1 << 20));
    p.real = world.options.emulated_ranks_per_node == 0 && world.ranks_per_node < world.size;
    if (p.real && world.size % world.ranks_per_node != 0)
      throw InputError("comm_efficiency: the " + std::to_string(world.size) + " ranks are not spread evenly over the "
                       "nodes (at most " + std::to_string(world.ranks_per_node) + " on one): launch as many on each");
    if (p.real) p.ranks_per_node = world.ranks_per_node;
    if (world.size % p.ranks_per_node != 0 || world.size / p.ranks_per_node < 2)
      throw InputError("comm_efficiency.ranks_per_node = " + std::to_string(p.ranks_per_node) + " must divide the " +
                       std::to_string(world.size) + " ranks into 2 or more nodes");
    p.slow.slow_node = int(int_in_range(s, "slow_node", "comm_efficiency.slow_node", 0, world.size / p.ranks_per_node - 1));
    if (p.real) p.fast = p.slow = LinkModel{};  // unlimited: the real links' time, the bytes still counted
    ParallelLayout l;
    l.dp = world.size;
    l.micro_batches = p.cfg.micro_batches;
    validate_layout(l, p.model, p.cfg.global_batch, world.size, p.cfg.seq_len);
    validate_train_config(p.cfg, p.model, world.size);
    for (const Method& m : p.methods)
      if (m.hierarchical) validate_dp_hierarchical(l, 0, p.ranks_per_node);
    return p;
  }
  json to_json() const {
    json ms = json::array();
    for (const Method& m : methods)
      ms.push_back({{"name", m.name}, {field_key(LayoutKey::staleness), m.sync.staleness},
                    {field_key(LayoutKey::delay_compensation), m.sync.delay_compensation},
                    {field_key(LayoutKey::local_steps), m.sync.local_steps}, {"outer_lr", m.sync.outer_lr},
                    {"outer_momentum", m.sync.outer_momentum}, {"hierarchical", m.hierarchical}});
    return {{"model", dtb::to_json(model)}, {"train", dtb::to_json(cfg)}, {"ranks_per_node", ranks_per_node},
            {"link_gbps", fast.gbps}, {"slow_link_gbps", slow.slow_gbps}, {"slow_node", slow.slow_node},
            {"latency_s", fast.latency_s}, {"methods", ms}};
  }
};

// What one training run of a method over one link condition measured (rank 0's view).
struct Run {
  std::vector<double> step_s, losses, grad_norms;
  double dp_bytes = 0, cross_bytes = 0, wait_s = 0, replica_params = 0;
};

// The mean loss over the last quarter of the steps (at least one): the loss "after N steps",
// less noisy than the last step's alone.
double tail_loss(const std::vector<double>& losses) {
  const size_t n = std::max<size_t>(1, losses.size() / 4);
  double s = 0;
  for (size_t i = losses.size() - n; i < losses.size(); ++i) s += losses[i];
  return s / double(n);
}

/// The real links out of each node, measured: for each node j >= 1 a ping-pong of `bytes` between
/// world rank 0 and node j's first rank (best of 3), and node 0's as the fastest of those.
/// Returns GB/s per direction (1e9 bytes/s) per node, on every rank. Collective over `world`;
/// nodes are blocks of `per_node` consecutive ranks.
std::vector<double> measure_node_links(Communicator& world, int per_node, size_t bytes) {
  const int nodes = world.size() / per_node;
  std::vector<double> gbps(size_t(nodes), 0.0);
  std::vector<float> buf(bytes / 4, 1.0f);
  const size_t count = buf.size();
  for (int j = 1; j < nodes; ++j) {
    const int peer = j * per_node;
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      if (world.rank() == 0) {
        world.send(buf.data(), count, DType::f32, peer, 71);
        world.recv(buf.data(), count, DType::f32, peer, 72);
      } else if (world.rank() == peer) {
        world.recv(buf.data(), count, DType::f32, 0, 71);
        world.send(buf.data(), count, DType::f32, 0, 72);
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (world.rank() == 0) best = std::max(best, 2.0 * double(4 * count) / dt * 1e-9);
    }
    gbps[size_t(j)] = best;
  }
  world.broadcast(gbps.data(), gbps.size(), DType::f64, 0);
  if (nodes > 1) gbps[0] = *std::max_element(gbps.begin() + 1, gbps.end());
  return gbps;
}

class CommEfficiencySuite : public SuiteWithParams<Params> {
 public:
  std::string name() const override { return "comm_efficiency"; }
  std::string description() const override {
    return "sync vs hierarchical all-reduce vs stale gradients vs local steps over emulated fast and slow "
           "inter-node links: tokens/s, bytes per token, loss";
  }
  json defaults() const override {
    return {{"model", {{"L", 2}, {"C", 64}, {"NH", 4}, {"T", 64}, {"V", 256}}},
            {"steps", 40},
            {"global_batch", 16},
            {"micro_batches", 1},
            {"seq_len", 64},
            {"lr", 1e-3},
            {"beta1", 0.9},
            {"beta2", 0.95},
            {"eps", 1e-8},
            {"weight_decay", 0.0},
            {"ranks_per_node", 2},
            {"link_gbps", 1.0},
            {"slow_link_gbps", 0.05},
            {"slow_node", 1},
            {"latency_us", 20.0},
            {spelling(LayoutKey::delay_compensation).config_key, kDefaultDelayCompensation},
            {"outer_lr", 0.7},
            {"outer_momentum", 0.9},
            {"methods", {"sync", "hierarchical", "stale1", "stale2", "stale1:dc", "stale2:dc", "local4"}}};
  }
  void validate(const json& section, const json& config, const WorldInfo& world) const override {
    const Params p = Params::parse(section, config, world);
    check_fits_in_memory(unsharded_training_state_bytes(p.model), world.ranks_per_node, "comm_efficiency: the model",
                         world.options);
  }

  SuiteResult run(SuiteContext& ctx) override;

 private:
  static Run train(SuiteContext& ctx, const Params& p, const Method& m, const LinkModel& link);
};

Run CommEfficiencySuite::train(SuiteContext& ctx, const Params& p, const Method& m, const LinkModel& link) {
  Communicator& world = ctx.world;
  Communicator& comm = ctx.device_world ? *ctx.device_world : world;
  ParallelLayout l;
  l.dp = world.size();
  l.micro_batches = p.cfg.micro_batches;
  DpSync sync = m.sync;
  sync.replicas = m.sync.local_steps > 0 ? l.dp : 1;  // DiLoCo: one replica per DP rank (DpSync::replicas)
  auto stats = std::make_shared<LinkStats>();
  // DP rank d is world rank d (tp = pp = 1): its node is d / ranks_per_node.
  LayoutHooks hooks;
  hooks.wrap_dp = [&](Communicator& dp) -> std::unique_ptr<Communicator> {
    return std::make_unique<EmulatedLinkCommunicator>(dp, dp.rank() / p.ranks_per_node, link, stats);
  };
  const LayoutOutcome o = run_layout({.model = p.model,
                                      .layout = {.l = l, .hier_node_ranks = m.hierarchical ? p.ranks_per_node : 0,
                                                 .dp_sync = sync},
                                      .train = p.cfg, .device = ctx.device,
                                      .ops = precision_ops(ctx.backend), .host = world, .device_comm = &comm,
                                      .data = *ctx.dataset, .gather = true, .hooks = &hooks});
  Run r;
  r.step_s = slowest_step_times(o, world);
  r.losses = o.losses;
  r.grad_norms = o.grad_norms;
  r.replica_params = o.replica_params;
  // The busiest rank's link bytes and waits; the DP bytes are every rank's alike.
  double mine[3] = {stats->sent_bytes, stats->wait_s, o.dp_comm_bytes}, most[3] = {0, 0, 0};
  world.all_reduce(mine, most, 3, DType::f64, ReduceOp::max);
  r.cross_bytes = most[0], r.wait_s = most[1], r.dp_bytes = most[2];
  return r;
}

SuiteResult CommEfficiencySuite::run(SuiteContext& ctx) {
  DTB_CHECK(ctx.dataset != nullptr, "comm_efficiency suite needs a dataset");
  const Params p = Params::parse(ctx.section, ctx.config, ctx.world_info());
  const int n = ctx.world.size(), nodes = n / p.ranks_per_node;
  const double tokens = double(p.cfg.global_batch) * p.cfg.seq_len;
  ctx.print("# comm_efficiency: GPT L=" + std::to_string(p.model.L) + " C=" + std::to_string(p.model.C) + ", " +
            std::to_string(gpt_num_params(p.model)) + " params, DP " + std::to_string(n) + " over " +
            std::to_string(nodes) + (p.real ? " real" : " emulated") + " nodes of " + std::to_string(p.ranks_per_node) +
            ", " + std::to_string(p.cfg.steps) + " steps of " + std::to_string(int64_t(tokens)) + " tokens");
  char head[300];
  // Real nodes: the slowest link measured stands for the link condition (slow_node, slow_link_gbps).
  double link_gbps = p.fast.gbps, slow_gbps = p.slow.slow_gbps, latency_us = p.fast.latency_s * 1e6;
  int slow_node = p.slow.slow_node;
  if (p.real) {
    const std::vector<double> g = measure_node_links(ctx.world, p.ranks_per_node, size_t(2) << 20);
    slow_node = int(std::min_element(g.begin() + 1, g.end()) - g.begin());  // node 0 is where they are measured from
    link_gbps = *std::max_element(g.begin(), g.end()), slow_gbps = g[size_t(slow_node)], latency_us = 0;
    std::snprintf(head, sizeof head,
                  "# the real links, nothing emulated: measured (2 MiB ping-pong) %.3g GB/s at most, node %d's %.3g GB/s "
                  "(the slowest)", link_gbps, slow_node, slow_gbps);
  } else {
    std::snprintf(head, sizeof head,
                  "# links out of each node %.3g GB/s (fast); node %d's at %.3g GB/s (slow); latency %.0f us",
                  link_gbps, slow_node, slow_gbps, latency_us);
  }
  ctx.print(head);
  ctx.print("#  method         link   step (ms)   tokens/s   vs sync   DP bytes/token   cross-node bytes/token   "
            "tail loss   vs sync");
  {  // A warm-up run, not recorded: the process's first training run pays one-time costs (the BLAS's
     // and MPI's first calls, first-touch page faults) that would otherwise count against sync's.
    Params warm = p;
    warm.cfg.steps = 2;
    train(ctx, warm, p.methods.front(), p.fast);
  }
  SuiteResult res;
  json curves = json::object(), norms = json::object();  // per method, the fast-link run's
  double sync_tps[2] = {0, 0}, sync_loss = 0;
  for (const Method& m : p.methods) {
    Run runs[2];
    const int conditions = p.real ? 1 : 2;  // real nodes: one run over the links as they are
    for (int slow = 0; slow < conditions; ++slow) runs[slow] = train(ctx, p, m, slow ? p.slow : p.fast);
    if (ctx.world.rank() != 0) continue;
    if (!p.real) {
      double differ = 0;
      for (size_t i = 0; i < runs[0].losses.size(); ++i)
        differ = std::max(differ, std::fabs(runs[0].losses[i] - runs[1].losses[i]));
      res.checks.push_back(make_check("comm_efficiency/" + m.name + "/losses_same_over_links", differ, 0.0,
                                      "max |loss(fast links) - loss(slow links)| over the steps, bitwise: the emulated "
                                      "links change the time of each collective, not what it computes"));
    }
    res.checks.push_back(make_check("comm_efficiency/" + m.name + "/replicas_identical",
                                    std::max(runs[0].replica_params, runs[conditions - 1].replica_params), 0.0,
                                    "max |difference| between DP replicas' final parameters, bitwise"));
    curves[m.name] = runs[0].losses;
    norms[m.name] = runs[0].grad_norms;
    const double loss = tail_loss(runs[0].losses);
    if (m.name == "sync") sync_loss = loss;
    for (int slow = 0; slow < conditions; ++slow) {
      const Run& r = runs[slow];
      double total = 0;
      for (double t : r.step_s) total += t;
      const double tps = tokens * double(r.step_s.size()) / total;
      if (m.name == "sync") sync_tps[slow] = tps;
      const Summary st = summarize(r.step_s);
      const std::string link = slow ? "slow" : "fast";
      json rec = benchmark_record("comm_efficiency/method:" + m.name + "/link:" + link, int64_t(r.step_s.size()), 1,
                                  total / double(r.step_s.size()), total / double(r.step_s.size()), "ms");
      rec["method"] = m.name;
      rec["link"] = link;
      rec["slow_link_gbps"] = p.real ? slow_gbps : slow ? p.slow.slow_gbps : p.fast.gbps;
      rec[field_key(LayoutKey::staleness)] = m.sync.staleness;
      rec[field_key(LayoutKey::delay_compensation)] = m.sync.delay_compensation;
      rec[field_key(LayoutKey::local_steps)] = m.sync.local_steps;
      rec["step_time_ms"] = to_json(st, 1e3);
      rec["tokens_per_s"] = tps;
      rec["speedup_vs_sync"] = tps / sync_tps[slow];
      rec["dp_bytes_per_token"] = r.dp_bytes / (tokens * double(r.step_s.size()));
      rec["cross_node_bytes_per_token"] = r.cross_bytes / (tokens * double(r.step_s.size()));
      rec["link_wait_s"] = r.wait_s;
      rec["final_loss"] = loss;
      rec["loss_vs_sync"] = loss - sync_loss;
      res.benchmarks.push_back(rec);
      char line[300];
      std::snprintf(line, sizeof line, "   %-14s %-5s %10.2f %10.0f %9.3f %16.1f %24.1f %11.4f %+9.4f", m.name.c_str(),
                    link.c_str(), 1e3 * total / double(r.step_s.size()), tps, tps / sync_tps[slow],
                    rec["dp_bytes_per_token"].get<double>(), rec["cross_node_bytes_per_token"].get<double>(), loss,
                    loss - sync_loss);
      ctx.print(line);
    }
  }
  if (ctx.world.rank() == 0)
    res.data = {{"model", to_json(p.model)}, {"ranks_per_node", p.ranks_per_node}, {"nodes", nodes},
                {"link_gbps", link_gbps}, {"slow_link_gbps", slow_gbps}, {"slow_node", slow_node},
                {"latency_us", latency_us}, {"tokens_per_step", tokens}, {"losses", curves},
                {"grad_norms", norms}};
  return res;
}

}  // namespace

DTB_REGISTER_SUITE("comm_efficiency", CommEfficiencySuite);

}  // namespace dtb
