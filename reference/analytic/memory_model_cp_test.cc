// The memory plan against ParallelGpt's own allocations for the Llama block and context
// parallelism (reference/analytic/memory_model.h; the GPT-2 cases: memory_model_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/error.h"
#include "reference/analytic/memory_model.h"
#include "reference/analytic/memory_model_test_util.h"
#include "reference/parallel/parallel_gpt.h"
#include "reference/parallel/pipeline_schedule.h"
#include "reference/zero/zero.h"

namespace dtb {
namespace {

using memory_model_test::CopyComm;
using memory_model_test::expect_plan_matches;
using memory_model_test::small_plan;

TEST(MemoryModelPlan, MatchesParallelGptAllocationsLlamaAndCp) {
  // As MatchesParallelGptAllocations for the Llama block (RMSNorm, grouped-query attention with
  // 2 KV heads: sharded at tp 2, each shared by two ranks at tp 4; SwiGLU; the untied head) and
  // for context parallelism (both families, p2p and all_gather): every category's peak byte
  // for byte, the CP attention's transient scratch included, and CP's K/V blocks exactly the
  // comm_buffer peak (nothing else allocates comm_buffer here).
  struct L { int tp, pp, v, m; const char* s; };
  GptConfig llama{8, 64, 4, 32, 256};
  llama.arch = ModelArch::llama;
  llama.num_kv_heads = 2;
  llama.ffn_hidden = 96;
  for (bool is_llama_model : {true, false})
  for (int cp : {1, 2})
  for (const char* comm : {"p2p", "all_gather"})
  for (bool sp : {false, true})
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
  for (const L& l : {L{1, 1, 1, 2, "1f1b"}, L{2, 1, 1, 3, "gpipe"}, L{4, 2, 1, 3, "1f1b"}, L{1, 2, 2, 4, "interleaved"},
                     L{2, 2, 1, 2, "1f1b"}}) {
    if ((sp && l.tp == 1) || (cp == 1 && std::string(comm) != "p2p") || (!is_llama_model && cp == 1)) continue;
    PlanConfig c = small_plan(l.tp, l.pp, 1, l.s, l.v, l.m);
    if (is_llama_model) c.model = llama;
    c.recompute = rc;
    c.layout.sequence_parallel = sp;
    c.layout.cp = cp;
    c.layout.cp_comm_type = comm;
    const int B = c.micro_batch_size, Tn = c.seq_len / cp;
    const size_t BT = size_t(B) * Tn;
    std::vector<int32_t> ids(BT);
    for (size_t i = 0; i < BT; ++i) ids[i] = int32_t(i % size_t(c.model.V));
    std::vector<float> zeros(BT * size_t(c.model.C), 0.0f);
    for (int t = 0; t < l.tp; ++t)
      for (int p = 0; p < l.pp; ++p)
        for (int cr : {0, cp - 1}) {
          if (cr != 0 && cr == cp - 1 && cp == 1) continue;
          SCOPED_TRACE(std::string(is_llama_model ? "llama" : "gpt2") + " tp " + std::to_string(l.tp) + " cp " +
                       std::to_string(cp) + " " + comm + " pp " + std::to_string(l.pp) + " v " + std::to_string(l.v) +
                       " " + l.s + ", rank (" + std::to_string(t) + ", " + std::to_string(p) + ", cp " +
                       std::to_string(cr) + "), recompute " + std::string(to_string(rc)) +
                       (sp ? ", sequence parallel" : ""));
          CpuDevice dev;
          CopyComm tp(t, l.tp), dp(0, 1), cpc(cr, cp);
          GridCoord g{t, 0, p};
          g.cp = cr;
          ParallelGpt<float> model(c.model, c.layout, grid_rank(g, c.layout), dev, tp, nullptr, nullptr,
                                   cp > 1 ? &cpc : nullptr);
          model.set_recompute(rc);
          ZeroEngine<float> store(model, ZeroConfig{}, dp, AdamWParams{});
          for (const PipeAction& a : pipeline_schedule(l.s, l.pp, l.m, l.v, p)) {
            if (a.op == PipeOp::forward) {
              double loss = 0;
              model.forward(a.chunk, a.micro_batch, ids.data(), ids.data(), zeros.data(), B, Tn, &loss);
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
          ASSERT_EQ(r.tensors.size(), model.tensors().size());
          for (size_t i = 0; i < r.tensors.size(); ++i) {
            EXPECT_EQ(r.tensors[i].name, model.tensors()[i].name) << i;
            EXPECT_EQ(r.tensors[i].numel, model.tensors()[i].numel) << r.tensors[i].name;
          }
          expect_plan_matches(r, dev);
          EXPECT_EQ(r.cp_comm_buffer_bytes, dev.stats().peak_bytes(Tier::device, MemCategory::comm_buffer));
        }
  }
}

TEST(MemoryModelPlan, MatchesParallelGptAllocationsHalfCp) {
  // Context parallelism under a 16-bit recipe, both families: the log-sum-exp kept in fp32 (two
  // elements of T each), the CP pass's fp32 block log-sum-exp, everything else 2 bytes; the ZeRO
  // store's fp32 master and moments. Every category's peak equals the plan's.
  GptConfig llama{8, 64, 4, 32, 256};
  llama.arch = ModelArch::llama;
  llama.num_kv_heads = 2;
  llama.ffn_hidden = 96;
  for (bool is_llama_model : {false, true})
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
  for (auto [tp, pp] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{4, 1}}) {
    PlanConfig c = small_plan(tp, pp, 1, "1f1b", 1, 2);
    if (is_llama_model) c.model = llama;
    c.recompute = rc;
    c.layout.cp = 2;
    c.precision = Precision::bf16;
    const int B = c.micro_batch_size, Tn = c.seq_len / 2;
    const size_t BT = size_t(B) * Tn;
    std::vector<int32_t> ids(BT);
    for (size_t i = 0; i < BT; ++i) ids[i] = int32_t(i % size_t(c.model.V));
    std::vector<bf16> zeros(BT * size_t(c.model.C), bf16(0.0f));
    for (int t = 0; t < tp; ++t)
      for (int p = 0; p < pp; ++p) {
        SCOPED_TRACE(std::string(is_llama_model ? "llama" : "gpt2") + " bf16 tp " + std::to_string(tp) + " pp " +
                     std::to_string(pp) + " cp 2, rank (" + std::to_string(t) + ", " + std::to_string(p) +
                     "), recompute " + std::string(to_string(rc)));
        CpuDevice dev;
        CopyComm tpc(t, tp), dp(0, 1), cpc(1, 2);
        GridCoord g{t, 0, p};
        g.cp = 1;
        ParallelGpt<bf16> model(c.model, c.layout, grid_rank(g, c.layout), dev, tpc, nullptr, nullptr, &cpc);
        model.set_recompute(rc);
        ZeroEngine<bf16> store(model, ZeroConfig{}, dp, AdamWParams{});
        for (const PipeAction& a : pipeline_schedule("1f1b", pp, 2, 1, p)) {
          if (a.op == PipeOp::forward) {
            double loss = 0;
            model.forward(a.chunk, a.micro_batch, ids.data(), ids.data(), zeros.data(), B, Tn, &loss);
          } else {
            model.backward(a.chunk, a.micro_batch, zeros.data(), 1.0f);
          }
        }
        const RankPlan r = plan_rank(c, t, p);
        expect_plan_matches(r, dev);
        EXPECT_EQ(r.cp_comm_buffer_bytes, dev.stats().peak_bytes(Tier::device, MemCategory::comm_buffer));
      }
  }
}

TEST(MemoryModelPlan, ContextParallelShardsOverDpCp) {
  // ZeRO shards over the dp cp ranks of the data-and-context group: CP2 x DP2 shards as DP4.
  PlanConfig c = small_plan(1, 1, 2);
  c.layout.cp = 2;
  c.zero.stage = 3;
  PlanConfig d = small_plan(1, 1, 4);
  d.zero.stage = 3;
  const RankPlan rc = plan_rank(c, 0, 0), rd = plan_rank(d, 0, 0);
  EXPECT_EQ(rc.S, rd.S);
  EXPECT_EQ(rc.mem.get(Tier::device, MemCategory::param), rd.mem.get(Tier::device, MemCategory::param));
  // Half the rows: the activations shrink (not exactly half: the attention keeps its
  // log-sum-exp, and the ids), and the refusals are the layout validator's.
  EXPECT_LT(rc.mem.get(Tier::device, MemCategory::activation), rd.mem.get(Tier::device, MemCategory::activation));
  c.seq_len = 6;  // 2 cp = 4 does not divide 6
  try {
    plan_rank(c, 0, 0);
    ADD_FAILURE() << "seq_len 6 at cp 2 planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible by 2 x context_parallel = 4"), std::string::npos) << e.what();
  }
  c.seq_len = 16;
  c.layout.schedule = "zb-h1";
  c.layout.pp = 1;
  try {
    plan_rank(c, 0, 0);
    ADD_FAILURE() << "zb-h1 at cp 2 planned";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "context_parallel = 2 with schedule zb-h1 is not supported yet");
  }
}

}  // namespace
}  // namespace dtb
