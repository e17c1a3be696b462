// The analytic memory model against its sources: the ZeRO paper's Figure 1, DeepSpeed's
// estimator printouts (docs/code-docs/source/memory.rst), hand-computed totals, and the
// reference GPT's own allocations on a CpuDevice (one process, a stand-in TP group whose
// collectives only copy: the values are meaningless, the allocations are the trainer's).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/pipeline_schedule.h"
#include "reference/zero/zero.h"
#include "reference/analytic/memory_model_test_util.h"

namespace dtb {
namespace {

using memory_model_test::CopyComm;
using memory_model_test::expect_plan_matches;
using memory_model_test::small_plan;

std::string fixed(double x, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, x);
  return b;
}
// DeepSpeed prints f"{bytes/2**30:.2f}GB".
std::string ds_gb(double bytes) { return fixed(bytes / double(1ull << 30), 2); }

TEST(MemoryModelPaper, ZeroFigure1FourStages) {
  // Rajbhandari et al. 2019 Fig. 1: Ψ = 7.5B, Nd = 64, K = 12 (mixed precision), GB = 1e9.
  const double want[4] = {120.0, 31.40625, 16.640625, 1.875};
  const char* published[4] = {"120", "31.4", "16.6", "1.88"};
  const int digits[4] = {0, 1, 1, 2};
  for (int stage = 0; stage < 4; ++stage) {
    const MemoryBytes<double> m = zero_model_states(7.5e9, Precision::fp16, stage, 64);
    const double gb = m.total(Tier::device) / 1e9;
    EXPECT_DOUBLE_EQ(gb, want[stage]) << "stage " << stage;
    EXPECT_EQ(fixed(gb, digits[stage]), published[stage]) << "stage " << stage;
    EXPECT_EQ(m.total(Tier::host), 0.0);
  }
}

TEST(MemoryModelPaper, BytesPerParamByRecipe) {
  // fp32 Adam: no separate master copy; mixed: 16 B/param with K = 12.
  const StateBytesPerParam f = state_bytes_per_param(Precision::fp32);
  EXPECT_EQ(f.param, 4);
  EXPECT_EQ(f.grad, 4);
  EXPECT_EQ(f.master_param, 0);
  EXPECT_EQ(f.optimizer_state, 8);
  EXPECT_EQ(f.total(), 16);
  const StateBytesPerParam h = state_bytes_per_param(Precision::bf16);
  EXPECT_EQ(h.master_param + h.optimizer_state, 12);  // K
  EXPECT_EQ(h.total(), 16);
  // 1B parameters in fp32 with Adam: 16 GB, of which the optimizer state is 2x the weights.
  const MemoryBytes<double> m = zero_model_states(1e9, Precision::fp32, 0, 1);
  EXPECT_EQ(m.total(Tier::device), 16e9);
  EXPECT_EQ(m.get(Tier::device, MemCategory::optimizer_state), 2 * m.get(Tier::device, MemCategory::param));
  // Offload (stage 2, 8 ranks): the device keeps fp16 params and its grad shard; the host
  // the fp32 master, Adam and grad shards.
  const MemoryBytes<double> o = zero_model_states(8e9, Precision::bf16, 2, 8, Offload::cpu);
  EXPECT_EQ(o.total(Tier::device), 2 * 8e9 + 2 * 1e9);
  EXPECT_EQ(o.total(Tier::host), 16 * 1e9);
  EXPECT_THROW(zero_model_states(1e9, Precision::fp32, 0, 8, Offload::cpu), InputError);
  EXPECT_THROW(zero_model_states(1e9, Precision::fp32, 4, 8), InputError);
}

TEST(MemoryModelPaper, MoeModelStatesSplitExpertsOverTheirGroup) {
  // An MoE GPT (2 MoE layers of 8 experts, top-2): experts split over ep, sharded by ZeRO over
  // the dp / ep expert-data-parallel ranks; the rest over all dp ranks. Hand-computed per
  // category from moe_params' split; the split itself from gpt.h's counts.
  GptConfig m{2, 64, 4, 32, 256};
  m.moe.num_experts = 8, m.moe.topk = 2;
  const MoeParams n = moe_params(m);
  const double expert = double(moe_expert_params(m));  // one expert: fc, fc bias, proj, proj bias
  EXPECT_EQ(expert, 2.0 * 64 * 256 + 256 + 64);
  EXPECT_EQ(n.experts, 2 * 8 * expert);
  EXPECT_EQ(n.total, double(gpt_num_params(m)));
  EXPECT_EQ(n.non_expert + n.experts, n.total);
  EXPECT_EQ(n.active, n.non_expert + 2 * 2 * expert);  // each MoE layer's top-2
  EXPECT_EQ(n.per_rank(4), n.non_expert + n.experts / 4);
  // One rank holds everything: 16 bytes per parameter in fp32 Adam.
  EXPECT_EQ(moe_model_states(m, Precision::fp32, 0, 1, 1).model_states(Tier::device), 16 * n.total);
  // DP 4 x EP 2, ZeRO 3: parameters = 4 B x (non-expert / 4 + (experts / 2) / 2).
  const MemoryBytes<double> z3 = moe_model_states(m, Precision::fp32, 3, 4, 2);
  EXPECT_DOUBLE_EQ(z3.get(Tier::device, MemCategory::param), 4 * (n.non_expert / 4 + n.experts / 2 / 2));
  // DP 4 x EP 4, ZeRO 1: optimizer state sharded over 1 expert-data-parallel rank for the experts.
  const MemoryBytes<double> z1 = moe_model_states(m, Precision::fp32, 1, 4, 4);
  EXPECT_DOUBLE_EQ(z1.get(Tier::device, MemCategory::optimizer_state), 8 * (n.non_expert / 4 + n.experts / 4));
  EXPECT_DOUBLE_EQ(z1.get(Tier::device, MemCategory::grad), 4 * n.per_rank(4));
  for (auto [dp, ep] : {std::pair{4, 3}, std::pair{2, 4}, std::pair{4, 0}})
    EXPECT_THROW(moe_model_states(m, Precision::fp32, 0, dp, ep), InputError) << "dp " << dp << " ep " << ep;
  GptConfig dense{2, 64, 4, 32, 256};
  EXPECT_EQ(moe_params(dense).experts, 0.0);
}

TEST(MemoryModelDeepSpeed, Zero2T5_3bDocsExample) {
  // memory.rst: t5-3b, 1 node x 8 GPUs. Live model: 2,851,598,336 parameters (T5 3B:
  // shared embedding 32128 x 1024, 24 encoder and 24 decoder blocks, d_ff 16384, 32 x 128 heads).
  const double live = 2851598336.0;
  DeepSpeedEstimate e = deepspeed_zero2_estimate(live, 8, 1, true);
  EXPECT_EQ(ds_gb(e.cpu_bytes), "127.48");
  EXPECT_EQ(ds_gb(e.gpu_bytes), "5.31");
  e = deepspeed_zero2_estimate(live, 8, 1, false, 1.5, /*legacy=*/true);
  EXPECT_EQ(ds_gb(e.cpu_bytes), "127.48");
  EXPECT_EQ(ds_gb(e.gpu_bytes), "15.93");  // the docs' number: 4P + 16P/8 (the formula before 18)
  e = deepspeed_zero2_estimate(live, 8, 1, false);
  EXPECT_EQ(ds_gb(e.gpu_bytes), "11.29");  // today's code: 2P + int(18P/8)
  EXPECT_EQ(e.gpu_bytes, 2 * live + 6416096256.0);
  // The cold form with total_params=2851e6.
  EXPECT_EQ(ds_gb(deepspeed_zero2_estimate(2851e6, 8, 1, true).cpu_bytes), "127.45");
  EXPECT_EQ(ds_gb(deepspeed_zero2_estimate(2851e6, 8, 1, true).gpu_bytes), "5.31");
  EXPECT_EQ(ds_gb(deepspeed_zero2_estimate(2851e6, 8, 1, false, 1.5, true).gpu_bytes), "15.93");
}

TEST(MemoryModelDeepSpeed, Zero3T5_3bDocsTable) {
  struct Row {
    bool offload, offload_params, zero_init;
    const char *cpu_live, *gpu_live, *cpu_cold, *gpu_cold;
  };
  // memory.rst, live (2851598336 params, largest layer 32128 x 1024) and cold (2851e6, 32e6).
  const Row rows[] = {{true, true, true, "71.71", "0.12", "71.69", "0.12"},
                      {true, true, false, "127.48", "0.12", "127.45", "0.12"},
                      {true, false, true, "63.74", "0.79", "63.72", "0.78"},
                      {true, false, false, "127.48", "0.79", "127.45", "0.78"},
                      {false, false, true, "1.47", "6.10", "1.43", "6.09"},
                      {false, false, false, "127.48", "6.10", "127.45", "6.09"}};
  for (const Row& r : rows) {
    const DeepSpeedEstimate live =
        deepspeed_zero3_estimate(2851598336.0, 32128.0 * 1024, 8, 1, r.offload, r.offload_params, r.zero_init);
    const DeepSpeedEstimate cold = deepspeed_zero3_estimate(2851e6, 32e6, 8, 1, r.offload, r.offload_params, r.zero_init);
    EXPECT_EQ(ds_gb(live.cpu_bytes), r.cpu_live) << r.offload << r.offload_params << r.zero_init;
    EXPECT_EQ(ds_gb(live.gpu_bytes), r.gpu_live) << r.offload << r.offload_params << r.zero_init;
    EXPECT_EQ(ds_gb(cold.cpu_bytes), r.cpu_cold) << r.offload << r.offload_params << r.zero_init;
    EXPECT_EQ(ds_gb(cold.gpu_bytes), r.gpu_cold) << r.offload << r.offload_params << r.zero_init;
  }
}

TEST(MemoryModelMegatron, WeightAndOptimizerFormula) {
  // 12 L h^2 + 4 L h + 2 h transformer params; (that / pp + h V) / tp on the first stage.
  const GptConfig m{4, 64, 4, 32, 256};
  const double transformer = 12.0 * 4 * 64 * 64 + 4.0 * 4 * 64 + 2 * 64;
  EXPECT_DOUBLE_EQ(megatron_weight_and_optimizer_bytes(m, 1, 1, 1, false), (transformer + 64 * 256) * 18);
  EXPECT_DOUBLE_EQ(megatron_weight_and_optimizer_bytes(m, 2, 2, 4, true), (transformer / 2 + 64 * 256) / 2 * 9);
  // Korthikanti: 34 sbh + 5 a s^2 b without parallelism and recompute.
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(m, 32, 2, 1, Recompute::none),
                   34.0 * 32 * 2 * 64 + 5.0 * 4 * 32 * 32 * 2);
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(m, 32, 2, 1, Recompute::full), 2.0 * 32 * 2 * 64);
  // With TP 4 and sequence parallelism (eq. 4): sbh (34/t + 5 a s/(h t)); selective sbh 34/t.
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(m, 32, 2, 4, Recompute::none, true),
                   32.0 * 2 * 64 * (34.0 / 4 + 5.0 * 4 * 32 / (64 * 4)));
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(m, 32, 2, 4, Recompute::selective, true), 32.0 * 2 * 64 * 34 / 4);
}

TEST(MemoryModelPlan, SingleRankHandComputed) {
  // L 2, C 64, NH 4, T 64, V 256; B 4, Tn 64, one micro-batch.
  PlanConfig c;
  c.model = GptConfig{2, 64, 4, 64, 256};
  c.micro_batch_size = 4;
  const RankPlan r = plan_rank(c, 0, 0);
  EXPECT_EQ(r.N, gpt_num_params(c.model));
  EXPECT_EQ(r.N, 120576u);
  EXPECT_EQ(r.S, r.N);
  ASSERT_EQ(r.units.size(), 5u);  // wte, wpe, 2 layers, lnf
  EXPECT_EQ(r.units[0].name, "wte");
  EXPECT_EQ(r.units[3].name, "layer.1");
  EXPECT_EQ(r.units[4].numel, 128u);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::param), 4 * 120576u);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::grad), 4 * 120576u);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::optimizer_state), 8 * 120576u);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::master_param), 0u);
  // Per layer 6 BT C + 4 BT + 12 BT C + B NH Tn^2 = 361472; head BT C + 2 BT V + 6 BT =
  // 148992; (BT C + 2 x 361472 + 148992) x 4 + 2 BT ids x 4 = 3555328.
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::activation), 3555328u);
  // 2 BT C + 8 BT Cl + B NHl Tn^2 + BT Vl + BT = 295168 floats.
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::workspace), 1180672u);
  EXPECT_EQ(r.device_total(), 6665216u);
  EXPECT_EQ(r.mem.total(Tier::host), 0u);
}

TEST(MemoryModelPlan, ParamsOverAllRanksAreTheModel) {
  // Summed over every (tp, pp) rank, each TP-replicated tensor counted on TP rank 0 and the
  // tied wte on the first stage only, the held parameters are the model's.
  struct L { int tp, pp, v; const char* s; std::vector<int> layers; };
  for (const L& l : {L{1, 1, 1, "1f1b", {}}, L{2, 1, 1, "1f1b", {}}, L{4, 1, 1, "gpipe", {}}, L{1, 2, 1, "1f1b", {}},
                     L{1, 4, 1, "1f1b", {}}, L{2, 2, 1, "gpipe", {}}, L{4, 2, 1, "1f1b", {}},
                     L{2, 2, 2, "interleaved", {}}, L{1, 4, 2, "interleaved", {}}, L{1, 2, 4, "interleaved", {}},
                     L{1, 2, 1, "1f1b", {7, 1}}, L{2, 4, 1, "1f1b", {1, 2, 4, 1}}, L{1, 2, 2, "interleaved", {1, 3, 3, 1}}}) {
    PlanConfig c = small_plan(l.tp, l.pp, 1, l.s, l.v, l.v > 1 ? l.pp : 1);
    c.layout.pipeline_layers = l.layers;
    uint64_t sum = 0, held = 0;
    for (int t = 0; t < l.tp; ++t)
      for (int p = 0; p < l.pp; ++p) {
        const RankPlan r = plan_rank(c, t, p);
        held += r.N;
        for (const PlanTensor& x : r.tensors) {
          if (x.tp_replicated && t != 0) continue;
          if (x.name == "wte" && p != 0) continue;
          sum += x.numel;
        }
      }
    EXPECT_EQ(sum, gpt_num_params(c.model)) << "tp " << l.tp << " pp " << l.pp << " v " << l.v;
    EXPECT_GE(held, sum);
  }
}

TEST(MemoryModelPlan, ZeroStagesShardByPaddedUnits) {
  PlanConfig c = small_plan(1, 1, 3);
  c.layout.micro_batches = 1;
  RankPlan r = plan_rank(c, 0, 0);
  uint64_t S = 0;
  for (const ZeroUnit& u : r.units) {
    EXPECT_EQ(u.shard, (u.numel + 2) / 3);
    S += u.shard;
  }
  EXPECT_EQ(r.S, S);
  EXPECT_GT(3 * S, r.N);  // padding: some unit does not divide by 3
  const uint64_t N = r.N;
  const uint64_t want[4][3] = {{N, N, 2 * N}, {N, N, 2 * S}, {N, S, 2 * S}, {S, S, 2 * S}};
  for (int z = 0; z < 4; ++z) {
    c.zero.stage = z;
    r = plan_rank(c, 0, 0);
    EXPECT_EQ(r.mem.get(Tier::device, MemCategory::param), 4 * want[z][0]) << z;
    EXPECT_EQ(r.mem.get(Tier::device, MemCategory::grad), 4 * want[z][1]) << z;
    EXPECT_EQ(r.mem.get(Tier::device, MemCategory::optimizer_state), 4 * want[z][2]) << z;
    EXPECT_EQ(r.mem.get(Tier::device, MemCategory::master_param), 0u) << z;
    if (z == 0) continue;
    c.zero.offload_optimizer = true;
    const RankPlan o = plan_rank(c, 0, 0);
    c.zero.offload_optimizer = false;
    EXPECT_EQ(o.mem.get(Tier::device, MemCategory::optimizer_state), 0u);
    EXPECT_EQ(o.mem.get(Tier::device, MemCategory::param), 4 * want[z][0]);
    EXPECT_EQ(o.mem.get(Tier::host, MemCategory::master_param), 4 * S);
    EXPECT_EQ(o.mem.get(Tier::host, MemCategory::optimizer_state), 8 * S);
    EXPECT_EQ(o.mem.get(Tier::host, MemCategory::grad), 4 * S);
  }
  c.zero.stage = 0;
  c.zero.offload_optimizer = true;
  EXPECT_THROW(plan_rank(c, 0, 0), InputError);
  c.zero.offload_optimizer = false;
  c.zero.stage = 4;
  EXPECT_THROW(plan_rank(c, 0, 0), InputError);
  // Mixed precision (planned): 2-byte params and grads, fp32 master and Adam, sharded as ZeRO.
  c.zero.stage = 1;
  c.precision = Precision::bf16;
  r = plan_rank(c, 0, 0);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::param), 2 * N);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::master_param), 4 * S);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::optimizer_state), 8 * S);
}

TEST(MemoryModelPlan, ActivationSetsGpipeVs1f1b) {
  // p 4, m 8: GPipe keeps all 8 micro-batches on every stage, 1F1B p - stage.
  for (int st = 0; st < 4; ++st) {
    EXPECT_EQ(activation_sets_per_chunk("gpipe", 4, 8, 1, st), std::vector<int>{8}) << st;
    EXPECT_EQ(activation_sets_per_chunk("1f1b", 4, 8, 1, st), std::vector<int>{4 - st}) << st;
  }
  // The plan multiplies them out: stage 1 under 1F1B holds 3 sets.
  const PlanConfig c = small_plan(1, 4, 1, "1f1b", 1, 8);
  const RankPlan r = plan_rank(c, 0, 1);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::activation), 3 * r.activation_set_bytes[0]);
  // Interleaved: per chunk, and the sum over chunks matches the simulator's peak.
  const PipelineSimulation sim = simulate_pipeline("interleaved", 4, 8, 2, 1.0, 2.0);
  for (int st = 0; st < 4; ++st) {
    const std::vector<int> sets = activation_sets_per_chunk("interleaved", 4, 8, 2, st);
    EXPECT_GE(sets[0] + sets[1], sim.peak_in_flight_chunks[size_t(st)]) << st;
  }
}

TEST(MemoryModelPlan, MatchesParallelGptAllocations) {
  // The plan of each (tp, pp) rank equals what ParallelGpt and its ZeRO-0 store allocate when
  // the stage's schedule runs (the rank's forwards and backwards with stand-in inputs):
  // every category's peak, byte for byte.
  struct L { int tp, pp, v, m; const char* s; std::vector<int> layers; };
  // Each recompute setting too: the measured activation and workspace bytes are the plan's;
  // each TP layout with sequence parallelism; and uneven layer splits (pipeline_layers).
  for (bool sp : {false, true})
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
  for (const L& l : {L{1, 1, 1, 2, "1f1b", {}}, L{2, 1, 1, 3, "gpipe", {}}, L{1, 2, 1, 4, "1f1b", {}},
                     L{2, 4, 1, 4, "gpipe", {}}, L{4, 2, 1, 3, "1f1b", {}}, L{1, 2, 2, 4, "interleaved", {}},
                     L{2, 2, 2, 2, "interleaved", {}}, L{1, 2, 1, 4, "1f1b", {5, 3}}, L{2, 4, 1, 4, "1f1b", {1, 3, 3, 1}},
                     L{1, 2, 2, 4, "interleaved", {3, 1, 2, 2}}, L{1, 2, 1, 4, "zb-h1", {}}, L{2, 2, 1, 3, "zb-h1", {}},
                     L{2, 4, 1, 6, "zb-h1", {1, 3, 3, 1}}, L{1, 1, 1, 2, "zb-h1", {}}}) {
    if (sp && l.tp == 1) continue;
    // zb-h1 is refused with full recompute (validate_schedule_recompute) and with sequence
    // parallelism (validate_layout).
    if ((rc == Recompute::full || sp) && l.s == std::string("zb-h1")) continue;
    PlanConfig c = small_plan(l.tp, l.pp, 1, l.s, l.v, l.m);
    c.layout.pipeline_layers = l.layers;
    c.recompute = rc;
    c.layout.sequence_parallel = sp;
    const int B = c.micro_batch_size, Tn = c.seq_len;
    const size_t BT = size_t(B) * Tn;
    std::vector<int32_t> ids(BT);
    for (size_t i = 0; i < BT; ++i) ids[i] = int32_t(i % size_t(c.model.V));
    std::vector<float> zeros(BT * size_t(c.model.C), 0.0f);
    for (int t = 0; t < l.tp; ++t)
      for (int p = 0; p < l.pp; ++p) {
        SCOPED_TRACE("tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp) + " v " + std::to_string(l.v) +
                     " " + l.s + " layers " + pipeline_layers_text(l.layers) + ", rank (" + std::to_string(t) + ", " + std::to_string(p) + "), recompute " +
                     std::string(to_string(rc)) + (sp ? ", sequence parallel" : ""));
        CpuDevice dev;
        CopyComm tp(t, l.tp), dp(0, 1);
        ParallelGpt<float> model(c.model, c.layout, grid_rank(GridCoord{t, 0, p}, c.layout), dev, tp);
        model.set_recompute(rc);
        ZeroEngine<float> store(model, ZeroConfig{}, dp, AdamWParams{});
        for (const PipeAction& a : pipeline_schedule(l.s, l.pp, l.m, l.v, p)) {
          if (a.op == PipeOp::forward) {
            double loss = 0;
            model.forward(a.chunk, a.micro_batch, ids.data(), ids.data(), zeros.data(), B, Tn, &loss);
          } else if (a.op == PipeOp::backward_input) {
            model.backward_input(a.chunk, a.micro_batch, zeros.data(), 1.0f);
          } else if (a.op == PipeOp::backward_weight) {
            model.backward_weight(a.chunk, a.micro_batch);
          } else {
            model.backward(a.chunk, a.micro_batch, zeros.data(), 1.0f);
          }
        }
        const RankPlan r = plan_rank(c, t, p);
        EXPECT_EQ(r.N, model.num_params());
        ASSERT_EQ(r.units.size(), model.units().size());
        for (size_t u = 0; u < r.units.size(); ++u) {
          EXPECT_EQ(r.units[u].name, model.units()[u].name);
          EXPECT_EQ(r.units[u].numel, model.units()[u].n);
        }
        expect_plan_matches(r, dev);
      }
  }
}

TEST(MemoryModelPlan, MatchesZeroEngineState) {
  // Stages 0-3, with and without offload, over 3 DP ranks (padded shards): the engine's
  // persistent state (params, grads, moments, host master and grads) is the plan's.
  for (auto [tp, pp] : {std::pair{1, 1}, std::pair{2, 2}})
    for (int z = 0; z < 4; ++z)
      for (bool off : {false, true}) {
        if (off && z == 0) continue;
        PlanConfig c = small_plan(tp, pp, 3);
        c.zero.stage = z;
        c.zero.offload_optimizer = off;
        for (int p = 0; p < pp; ++p) {
          SCOPED_TRACE("zero " + std::to_string(z) + (off ? " offload" : "") + " pp rank " + std::to_string(p));
          CpuDevice dev;
          CopyComm tpc(0, tp), dpc(1, 3);
          ParallelGpt<float> model(c.model, c.layout, grid_rank(GridCoord{0, 1, p}, c.layout), dev, tpc);
          ZeroConfig zc;
          zc.stage = z;
          zc.offload_optimizer = off;
          ZeroEngine<float> store(model, zc, dpc, AdamWParams{});
          RankPlan r = plan_rank(c, 0, p);
          if (z > 0) {  // stage 0 stores N, no shards
            EXPECT_EQ(r.S, store.shard_elements());
          }
          // Nothing ran: no activations or scratch yet.
          r.mem.at(Tier::device, MemCategory::activation) = 0;
          r.mem.at(Tier::device, MemCategory::workspace) = 0;
          expect_plan_matches(r, dev);
        }
      }
}

TEST(MemoryModelPlan, RefusesLayoutsThatDoNotDivide) {
  EXPECT_THROW(plan_rank(small_plan(3, 1, 1), 0, 0), InputError);   // NH 4 over tp 3
  EXPECT_THROW(plan_rank(small_plan(1, 3, 1), 0, 0), InputError);   // L 8 over pp 3
  PlanConfig c = small_plan(1, 1, 1);
  c.seq_len = 33;
  EXPECT_THROW(plan_rank(c, 0, 0), InputError);
  c = small_plan(1, 1, 1);
  c.micro_batch_size = 0;
  EXPECT_THROW(plan_rank(c, 0, 0), InputError);
  EXPECT_THROW(plan_rank(small_plan(1, 2, 1), 0, 2), InputError);
  // An uneven split that does not sum to L (8), has a stage without layers, or is not one
  // entry per virtual stage; and one that does (pp 3 needs no divisibility then).
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{5, 2}, {8, 0}, {4, 4, 0}, {2, 2, 2, 2}}) {
    c = small_plan(1, 2, 1);
    c.layout.pipeline_layers = bad;
    EXPECT_THROW(plan_rank(c, 0, 0), InputError) << pipeline_layers_text(bad);
  }
  c = small_plan(1, 3, 1);
  c.layout.pipeline_layers = {2, 3, 3};
  EXPECT_NO_THROW(plan_rank(c, 0, 2));
}

TEST(MemoryModelPlan, LargeModelsWithoutOverflow) {
  // GPT-3 175B (L 96, C 12288, NH 96, T 2048; V 50304 so TP 8 divides it) on TP 8 x PP 16:
  // no allocation, 64-bit counts; each middle stage holds 6 layers of 12 C^2/8 + 7 C/8 + 6 C.
  PlanConfig c;
  c.model = GptConfig{96, 12288, 96, 2048, 50304};
  c.layout.tp = 8;
  c.layout.pp = 16;
  c.layout.micro_batches = 16;
  const RankPlan r = plan_rank(c, 0, 5);
  const uint64_t C = 12288, layer = 12 * C * C / 8 + 7 * C / 8 + 6 * C;
  EXPECT_EQ(r.N, 6 * layer);
  EXPECT_EQ(r.mem.get(Tier::device, MemCategory::param), 4 * 6 * layer);
  EXPECT_GT(r.mem.get(Tier::device, MemCategory::activation), uint64_t(1) << 32);
  const RankPlan b = plan_busiest_rank(c);
  EXPECT_EQ(b.pp_rank, 0);  // the embedding and the most sets in flight
}

}  // namespace
}  // namespace dtb
