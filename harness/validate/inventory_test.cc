// Tests of validate's level quick (harness/validate/inventory.h): the checks over synthetic
// inventories (a rank with another CPU, a node with less memory or fewer ranks, expectations
// met and missed), the --expect parser, and machines by boot id (hosts in namespaces of one
// kernel share one; crowded() counts their ranks together). The 4-rank run with emulated nodes
// is in harness/validate_test.sh.
#include "harness/validate/inventory.h"

#include <gtest/gtest.h>

#include <set>

#include "harness/validate/collective.h"
#include "kernels/error.h"

namespace dtb {
namespace {

using nlohmann::json;

// ranks x {node, cpu, cores, memory}: two emulated nodes of two ranks, all alike.
std::vector<json> fleet() {
  std::vector<json> inv;
  for (int r = 0; r < 4; ++r)
    inv.push_back({{"rank", r}, {"node", r < 2 ? "a" : "b"}, {"device", "cpu: X"}, {"cpu_model", "X"}, {"cores", 8},
                   {"memory_bytes", 64e9}, {"mpi_version", "mpi 1"}, {"blas_version", "blas 1"}, {"backend", "cpu"}});
  return inv;
}

const ValidateCheck& find(const std::vector<ValidateCheck>& cs, const std::string& name) {
  for (const ValidateCheck& c : cs)
    if (c.name == name) return c;
  throw std::runtime_error("no check " + name);
}

TEST(ValidateQuick, AHealthyFleetPasses) {
  const auto checks = quick_checks(fleet(), parse_expectations("nodes=2,ranks_per_node=2,device=x,cores=8,memory_gb=60"));
  for (const ValidateCheck& c : checks) EXPECT_EQ(c.status, "pass") << c.name << ": " << c.detail;
  EXPECT_EQ(checks.size(), 8u + 5u);  // 8 consistency checks (machines among them), 5 expectations
}

TEST(ValidateQuick, TheOddRankAndNodeAreNamed) {
  auto inv = fleet();
  inv[3]["cpu_model"] = "Y";
  inv[2]["memory_bytes"] = 64e9 * 0.9;  // node b's first rank stands for the node: 10% less
  const auto checks = quick_checks(inv, {});
  const ValidateCheck& cpu = find(checks, "consistency/cpu_model");
  EXPECT_EQ(cpu.status, "fail");
  EXPECT_EQ(cpu.ranks, std::vector<int>{3});
  EXPECT_EQ(cpu.nodes, std::vector<std::string>{"b"});
  EXPECT_NE(cpu.detail.find("rank 3 (node b) has Y, the others X"), std::string::npos) << cpu.detail;
  const ValidateCheck& mem = find(checks, "consistency/memory");
  EXPECT_EQ(mem.status, "warn");  // 5% < 10% <= 20%
  EXPECT_EQ(mem.nodes, std::vector<std::string>{"b"});
  inv[2]["memory_bytes"] = 64e9 * 0.7;
  EXPECT_EQ(find(quick_checks(inv, {}), "consistency/memory").status, "fail");
}

TEST(ValidateQuick, UnevenNodesAndMissedExpectations) {
  auto inv = fleet();
  inv.push_back(inv[3]);
  inv[4]["rank"] = 4;  // node b now has 3 ranks
  const auto checks = quick_checks(inv, parse_expectations("nodes=3,cores=16,device=H200,gpus_per_node=8"));
  const ValidateCheck& rpn = find(checks, "consistency/ranks_per_node");
  EXPECT_EQ(rpn.status, "fail");  // 2 and 3: the tie goes to the first node's count
  EXPECT_EQ(rpn.nodes, std::vector<std::string>{"b"});
  EXPECT_EQ(find(checks, "expect/nodes").status, "fail");
  const ValidateCheck& cores = find(checks, "expect/cores");
  EXPECT_EQ(cores.status, "fail");
  EXPECT_EQ(cores.nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cores.node_detail.at("a"), "8, expected at least 16 cores");
  EXPECT_EQ(find(checks, "expect/device").ranks, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(find(checks, "expect/gpus_per_node").status, "fail");  // cpu backend: 0 GPUs
}

// GPU ranks: the driver, CUDA and NCCL versions must agree, and no two ranks of a node may share
// a device; without GPUs these checks are absent, not skipped.
TEST(ValidateQuick, GpuVersionsAndDeviceIds) {
  EXPECT_THROW(find(quick_checks(fleet(), {}), "consistency/driver_version"), std::runtime_error);
  auto inv = fleet();
  for (json& r : inv) {
    r["driver_version"] = "12.4", r["nccl_version"] = "2.21.5", r["cuda_runtime_version"] = "12.4";
    r["device_pci_bus_id"] = "0000:0" + std::to_string(r["rank"].get<int>() % 2) + ":00.0";
  }
  inv[2]["nccl_version"] = "2.18.1";
  inv[3]["device_pci_bus_id"] = inv[2]["device_pci_bus_id"];  // node b: ranks 2 and 3 on one GPU
  const auto checks = quick_checks(inv, {});
  EXPECT_EQ(find(checks, "consistency/driver_version").status, "pass");
  const ValidateCheck& nccl = find(checks, "consistency/nccl_version");
  EXPECT_EQ(nccl.status, "fail");
  EXPECT_EQ(nccl.ranks, std::vector<int>{2});
  const ValidateCheck& ids = find(checks, "consistency/device_ids");
  EXPECT_EQ(ids.status, "fail");
  EXPECT_EQ(ids.nodes, std::vector<std::string>{"b"});
  EXPECT_EQ(ids.ranks, (std::vector<int>{2, 3}));
}

TEST(ValidateQuick, UnreadableFieldsAreSkippedNotPassed) {
  auto inv = fleet();
  for (json& r : inv) r["cpu_model"] = nullptr;
  EXPECT_EQ(find(quick_checks(inv, {}), "consistency/cpu_model").status, "skip");
}

TEST(ValidateQuick, ExpectationsParse) {
  const auto e = parse_expectations("gpus_per_node=8,device=H200,memory_gb=1.5e3");
  EXPECT_EQ(e.at("device"), "H200");
  EXPECT_EQ(e.at("memory_gb"), "1.5e3");
  EXPECT_TRUE(parse_expectations("").empty());
  for (const char* bad : {"gpus=8", "nodes", "=3", "cores=", "cores=-1", "cores=many", "nodes=1,nodes=2", "nodes=1,"})
    EXPECT_THROW(parse_expectations(bad), InputError) << bad;
}

// inv: one rank per host h<r>, each with `boot` ids and 2 cores.
std::vector<json> machines(const std::vector<std::string>& boot) {
  std::vector<json> inv;
  for (size_t r = 0; r < boot.size(); ++r)
    inv.push_back({{"rank", r}, {"host", "h" + std::to_string(r)}, {"node", "h" + std::to_string(r)},
                   {"node_index", r}, {"cores", 2}, {"boot_id", boot[r]}});
  return inv;
}

// Four hosts in namespaces of one kernel (one boot id) on 2 cores: one machine, crowded, the
// reason naming the hosts; four boot ids: four machines, not crowded.
TEST(ValidateMachines, HostsSharingABootIdShareOneMachine) {
  const std::vector<json> shared = machines({"k1", "k1", "k1", "k1"});
  const auto sm = shared_machines(shared);
  ASSERT_EQ(sm.size(), 1u);
  EXPECT_EQ(sm[0].hosts, (std::vector<std::string>{"h0", "h1", "h2", "h3"}));
  const std::string why = crowded(shared, true);
  EXPECT_NE(why.find("hosts h0, h1, h2, h3 share one machine (boot k1) and run 4 ranks at once on 2 cores"),
            std::string::npos) << why;
  const std::vector<json> apart = machines({"k1", "k2", "k3", "k4"});
  EXPECT_TRUE(shared_machines(apart).empty());
  EXPECT_EQ(crowded(apart, true), "");
  // Two machines of two hosts: 2 ranks on 2 cores each, not crowded, both reported shared.
  const std::vector<json> pairs = machines({"k1", "k1", "k2", "k2"});
  EXPECT_EQ(shared_machines(pairs).size(), 2u);
  EXPECT_EQ(crowded(pairs, true), "");
  // Without a boot id the host is the machine: emulated nodes of one host share it.
  std::vector<json> emulated = machines({"", "", "", ""});
  for (json& r : emulated) r["host"] = "vm", r["node"] = "vm/node" + std::to_string(r["rank"].get<int>() / 2);
  EXPECT_EQ(machine_of_rank(emulated), std::vector<std::string>(4, "host vm"));
  ASSERT_EQ(shared_machines(emulated).size(), 1u);
  EXPECT_EQ(shared_machines(emulated)[0].nodes, (std::vector<std::string>{"vm/node0", "vm/node1"}));
  const auto quick = quick_checks(shared, {});
  const auto mc = std::find_if(quick.begin(), quick.end(), [](const ValidateCheck& c) { return c.name == "consistency/machines"; });
  ASSERT_NE(mc, quick.end());
  EXPECT_NE(mc->detail.find("hosts h0, h1, h2, h3"), std::string::npos) << mc->detail;
}

}  // namespace
}  // namespace dtb
