// Tests of validate's SDC triage (harness/validate/sdc.h): the majority rule, the check's
// naming of ranks and nodes, the grouping by CPU model and BLAS build, the replay's
// determinism and its test-only bit flip, and the --inject RANK:sdc parser.
#include "harness/validate/sdc.h"

#include <gtest/gtest.h>

#include <cmath>

#include "harness/validate/faults.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

TEST(ValidateSdc, MajorityNamesTheOddRank) {
  const MajorityVerdict v = majority_hash({7, 7, 9, 7});
  EXPECT_TRUE(v.majority);
  EXPECT_EQ(v.reference, 7u);
  EXPECT_EQ(v.agree, 3);
  EXPECT_EQ(v.odd, std::vector<int>{2});
}

// A corrupt rank 0 is named alone: the others agree with each other, not with it.
TEST(ValidateSdc, OddRankZeroIsNamedAlone) {
  const MajorityVerdict v = majority_hash({5, 7, 7, 7, 7});
  EXPECT_TRUE(v.majority);
  EXPECT_EQ(v.reference, 7u);
  EXPECT_EQ(v.odd, std::vector<int>{0});
}

TEST(ValidateSdc, AllEqualNamesNone) {
  const MajorityVerdict v = majority_hash({3, 3, 3, 3});
  EXPECT_TRUE(v.majority);
  EXPECT_EQ(v.agree, 4);
  EXPECT_TRUE(v.odd.empty());
  EXPECT_TRUE(majority_hash({3}).odd.empty());
  EXPECT_TRUE(majority_hash({}).odd.empty());
}

// No hash held by more than half: every rank is named, as the rule cannot tell which is wrong.
TEST(ValidateSdc, TieHasNoMajority) {
  const std::vector<std::vector<uint64_t>> cases = {{1, 2}, {1, 1, 2, 2}, {1, 1, 2, 3}, {1, 2, 3}};
  for (const std::vector<uint64_t>& h : cases) {
    const MajorityVerdict v = majority_hash(h);
    EXPECT_FALSE(v.majority);
    EXPECT_EQ(v.odd.size(), h.size());
  }
}

// Four ranks on two nodes; each rank's chained step hashes.
std::vector<std::vector<uint64_t>> replays(int odd_rank, int from_step) {
  std::vector<std::vector<uint64_t>> h(4, std::vector<uint64_t>{11, 12, 13});
  for (int s = from_step; s < 3 && odd_rank >= 0; ++s) h[size_t(odd_rank)][size_t(s)] += 100;
  return h;
}
const std::vector<std::string> kNodes = {"vm/node0", "vm/node0", "vm/node1", "vm/node1"};
const std::vector<std::vector<int>> kOneGroup = {{0, 1, 2, 3}};
const std::vector<double> kLoss(4, 5.55);  // a fresh model's first loss, near ln 256

TEST(ValidateSdc, CheckNamesRankNodeAndStep) {
  const ValidateCheck c = judge_sdc(replays(2, 1), kLoss, kOneGroup, kNodes, "the replay");
  EXPECT_EQ(c.name, "sdc/replay");
  EXPECT_EQ(c.status, "fail");
  EXPECT_EQ(c.ranks, std::vector<int>{2});
  EXPECT_EQ(c.nodes, std::vector<std::string>{"vm/node1"});
  EXPECT_NE(c.detail.find("rank 2's replay differs from the majority's (3 of 4 ranks agree) from step 2 of 3 on"),
            std::string::npos)
      << c.detail;
  EXPECT_EQ(c.node_detail.count("vm/node0"), 0u);

  const ValidateCheck z = judge_sdc(replays(0, 0), kLoss, kOneGroup, kNodes, "the replay");
  EXPECT_EQ(z.ranks, std::vector<int>{0});
  EXPECT_EQ(z.nodes, std::vector<std::string>{"vm/node0"});
  EXPECT_NE(z.detail.find("from step 1 of 3"), std::string::npos) << z.detail;

  const ValidateCheck ok = judge_sdc(replays(-1, 0), kLoss, kOneGroup, kNodes, "the replay");
  EXPECT_EQ(ok.status, "pass");
  EXPECT_TRUE(ok.ranks.empty() && ok.nodes.empty());
  EXPECT_NE(ok.detail.find("4 ranks bitwise equal"), std::string::npos) << ok.detail;
}

// Within groups of one CPU model: a group of two that disagrees has no majority and both are
// named; a rank alone with its CPU model is not compared; no group of two skips.
TEST(ValidateSdc, CheckComparesWithinGroups) {
  auto h = replays(3, 2);
  const ValidateCheck c = judge_sdc(h, kLoss, {{0, 1}, {2, 3}}, kNodes, "the replay");
  EXPECT_EQ(c.status, "fail");
  EXPECT_EQ(c.ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(c.nodes, std::vector<std::string>{"vm/node1"});
  EXPECT_NE(c.detail.find("no majority"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("within 2 groups"), std::string::npos) << c.detail;

  const ValidateCheck alone = judge_sdc(h, kLoss, {{0, 1, 2}, {3}}, kNodes, "the replay");
  EXPECT_EQ(alone.status, "pass") << alone.detail;
  EXPECT_NE(alone.detail.find("rank 3 alone with its CPU model"), std::string::npos) << alone.detail;

  EXPECT_EQ(judge_sdc(h, kLoss, {{0}, {1}, {2}, {3}}, kNodes, "the replay").status, "skip");
  EXPECT_EQ(judge_sdc({{1, 2, 3}}, {5.55}, {{0}}, {"vm/node0"}, "the replay").status, "skip");
}

// The train check's replicas: a rank 0 off the others' parameters is named alone at its node,
// not every other rank; equal replicas name nobody; 2 replicas that differ have no majority.
TEST(ValidateSdc, TrainReplicasByMajority) {
  const ValidateCheck c = replicas_check({5, 7, 7, 7}, kNodes, 6);
  EXPECT_EQ(c.name, "train/world");
  EXPECT_EQ(c.status, "fail");
  EXPECT_EQ(c.ranks, std::vector<int>{0});
  EXPECT_EQ(c.nodes, std::vector<std::string>{"vm/node0"});
  EXPECT_EQ(c.node_detail.at("vm/node0"), "rank 0's parameters differ from the majority's (3 ranks)");
  EXPECT_NE(c.detail.find("after 6 steps, ranks 0 hold other parameters than the majority's"), std::string::npos)
      << c.detail;
  EXPECT_EQ(replicas_check({7, 7, 7, 7}, kNodes, 6).status, "pass");
  EXPECT_TRUE(replicas_check({7, 7, 7, 7}, kNodes, 6).ranks.empty());
  const ValidateCheck tie = replicas_check({5, 7}, {"a/node0", "a/node1"}, 6);
  EXPECT_EQ(tie.ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(tie.detail.find("no parameters held by more than half"), std::string::npos) << tie.detail;
}

// The known value: a first loss far from ln 256 names its rank wherever it is, even alone in
// its group or as the only rank; the others' agreement is judged as before.
TEST(ValidateSdc, CheckNamesAGrossFirstLoss) {
  const std::vector<double> loss = {5.55, 5.55, 5.55, 9.0};
  const ValidateCheck c = judge_sdc(replays(-1, 0), loss, {{0, 1, 2}, {3}}, kNodes, "the replay");
  EXPECT_EQ(c.status, "fail");
  EXPECT_EQ(c.ranks, std::vector<int>{3});
  EXPECT_NE(c.detail.find("rank 3's first loss 9 is not within 0.1 of ln 256"), std::string::npos) << c.detail;
  const ValidateCheck one = judge_sdc({{1, 2, 3}}, {std::nan("")}, {{0}}, {"vm/node0"}, "the replay");
  EXPECT_EQ(one.status, "fail");
  EXPECT_EQ(one.ranks, std::vector<int>{0});
  // Off the majority and off the known value: named once.
  const ValidateCheck both = judge_sdc(replays(3, 0), loss, kOneGroup, kNodes, "the replay");
  EXPECT_EQ(both.ranks, std::vector<int>{3});
}

TEST(ValidateSdc, GroupsByCpuModelAndBlas) {
  auto rank = [](json cpu, const char* blas) { return json{{"cpu_model", cpu}, {"blas_version", blas}}; };
  const std::vector<json> inv = {rank("A", "x"), rank("B", "x"), rank("A", "x"), rank("A", "y"), rank(nullptr, "x")};
  EXPECT_EQ(sdc_groups(inv), (std::vector<std::vector<int>>{{0, 2}, {1}, {3}, {4}}));
}

// The replay is bitwise repeatable, and the injected bit flip (in step 2's first GEMM) changes
// the hashes from step 2 on, not before.
TEST(ValidateSdc, ReplayIsDeterministicAndTheFlipShows) {
  const SdcReplay a = sdc_replay(false), b = sdc_replay(false), bad = sdc_replay(true);
  ASSERT_EQ(a.step_hashes.size(), size_t(kSdcSteps));
  EXPECT_EQ(a.step_hashes, b.step_hashes);
  EXPECT_EQ(bad.step_hashes[0], a.step_hashes[0]);
  for (size_t s = 1; s < a.step_hashes.size(); ++s) EXPECT_NE(bad.step_hashes[s], a.step_hashes[s]) << s;
  EXPECT_NEAR(a.first_loss, std::log(256.0), kSdcLossBand / 4);  // a fresh model predicts bytes uniformly
  EXPECT_LT(a.last_loss, a.first_loss);
}

TEST(ValidateSdc, InjectionParses) {
  const Injection i = parse_injection("2:sdc", 4);
  EXPECT_EQ(i.rank, 2);
  EXPECT_TRUE(i.sdc);
  EXPECT_FALSE(i.hang);
  EXPECT_FALSE(parse_injection("2:hang", 4).sdc);
  for (const char* bad : {"4:sdc", "-1:sdc", "x:sdc", "2:sdc:2", "2:sdc:", ":sdc", "sdc"})
    EXPECT_THROW(parse_injection(bad, 4), InputError) << bad;
}

}  // namespace
}  // namespace dtb
