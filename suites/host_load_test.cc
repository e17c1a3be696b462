// The arithmetic of other work on a host (suites/host_load.h): /proc/stat's busy fields, cores
// of other work as the host's busy time less this job's ranks', its tick resolution, and when
// it is worth a line.
#include <gtest/gtest.h>

#include "suites/host_load.h"

namespace dtb {
namespace {

TEST(HostLoad, ProcStatBusyIsUserNiceSystemIrqSoftirqSteal) {
  // proc(5): cpu user nice system idle iowait irq softirq steal guest guest_nice
  const std::string text =
      "cpu  100 20 30 5000 70 4 6 8 50 0\n"
      "cpu0 50 10 15 2500 35 2 3 4 25 0\n"
      "cpu1 50 10 15 2500 35 2 3 4 25 0\n"
      "intr 12345\nctxt 999\n";
  double busy = 0;
  int cpus = 0;
  ASSERT_TRUE(parse_proc_stat(text, busy, cpus));
  EXPECT_EQ(busy, 100 + 20 + 30 + 4 + 6 + 8);  // guest (50) is inside user already; idle, iowait not busy
  EXPECT_EQ(cpus, 2);
  ASSERT_TRUE(parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n", busy, cpus));  // an old kernel's four fields
  EXPECT_EQ(busy, 6);
  EXPECT_EQ(cpus, 1);
  EXPECT_FALSE(parse_proc_stat("intr 1\n", busy, cpus));
  EXPECT_FALSE(parse_proc_stat("cpu 1 2\n", busy, cpus));
}

TEST(HostLoad, OtherWorkIsBusyLessOwnPerSecond) {
  // 2 cores for 10 s: 19 s busy, of which this job's 4 ranks used 7 s: 1.2 cores of other work.
  const HostLoad h = host_load(19.0, 7.0, 10.0, 2, 4, 0.01);
  EXPECT_DOUBLE_EQ(h.busy_cores, 1.9);
  EXPECT_DOUBLE_EQ(h.own_cores, 0.7);
  EXPECT_DOUBLE_EQ(h.other_cores, 1.2);
  EXPECT_DOUBLE_EQ(h.resolution_cores, 2 * 0.01 / 10.0);
  EXPECT_TRUE(other_work_noted(h));
  // The ranks' exact CPU time can exceed the host's tick-counted busy time: never below 0.
  EXPECT_EQ(host_load(3.0, 3.04, 2.0, 2, 2, 0.01).other_cores, 0.0);
  // Quiet: 0.05 cores is not worth a line; nor is 0.3 cores over 0.1 s (the ticks alone: 0.2).
  EXPECT_FALSE(other_work_noted(host_load(1.5, 1.0, 10.0, 2, 4, 0.01)));
  EXPECT_FALSE(other_work_noted(host_load(0.13, 0.1, 0.1, 2, 4, 0.01)));
  EXPECT_EQ(host_load(1, 1, 0, 2, 1, 0.01).other_cores, 0.0);  // no interval, no rate
}

TEST(HostLoad, JsonAndLine) {
  HostLoad busy = host_load(19.0, 7.0, 10.0, 2, 4, 0.01), quiet = host_load(1.0, 0.9, 10.0, 8, 4, 0.01);
  busy.host = "vm", quiet.host = "other";
  const nlohmann::json j = host_load_json({quiet, busy});
  EXPECT_DOUBLE_EQ(j.at("other_cores").get<double>(), 1.2);
  EXPECT_EQ(j.at("hosts").size(), 2u);
  EXPECT_EQ(j.at("hosts")[1].at("host"), "vm");
  EXPECT_TRUE(host_load_json({}).is_null());
  EXPECT_EQ(other_work_line({quiet, busy}),
            "other work on host vm: 1.20 of 2 cores' worth (this job's 4 ranks: 0.70) over 10.0 s");
  EXPECT_EQ(other_work_line({quiet}), "");
}

TEST(HostLoad, ReadsThisMachine) {
  const CpuCounters a = read_cpu_counters();
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + 1e-9 * i;
  const CpuCounters b = read_cpu_counters();
  EXPECT_GT(b.wall_s, a.wall_s);
  EXPECT_GE(b.process_s, a.process_s);
  if (a.host_known) {
    EXPECT_GE(a.host_cpus, 1);
    EXPECT_GE(b.host_busy_s, a.host_busy_s);
  }
}

}  // namespace
}  // namespace dtb
