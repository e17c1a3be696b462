// Other work on the run's hosts: how many cores' worth of CPU time processes other than this
// job's ranks used while a suite ran (the host's busy time in /proc/stat less the ranks' own
// getrusage), so that a report says when a run shared its cores. Linux only (elsewhere: unknown).
// Not a scheduler model: it counts CPU time, not who waited for whom.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/comm/communicator.h"

namespace dtb {

/// One rank's CPU counters at an instant. host_busy_s: /proc/stat's aggregate "cpu" line,
/// user + nice + system + irq + softirq + steal (guest time is inside user and nice; idle and
/// iowait are not busy), in seconds (ticks / sysconf(_SC_CLK_TCK)); host_cpus: its "cpuN" lines;
/// host_known false where /proc/stat is unreadable. process_s: getrusage(RUSAGE_SELF) user +
/// system, every thread of this process (MPI's progress threads, the watchdog), seconds.
/// wall_s: steady_clock seconds. tick_s: one /proc/stat tick, seconds.
struct CpuCounters {
  double host_busy_s = 0, process_s = 0, wall_s = 0, tick_s = 0.01;
  int host_cpus = 0;
  bool host_known = false;
};

/// The counters now. Never throws: an unreadable /proc/stat gives host_known false.
CpuCounters read_cpu_counters();

/// /proc/stat's text parsed: `busy_ticks` (user + nice + system + irq + softirq + steal of the
/// aggregate "cpu" line; fields it lacks count 0) and `cpus` (the "cpuN" lines). False when the
/// text has no "cpu " line with at least four fields.
bool parse_proc_stat(const std::string& text, double& busy_ticks, int& cpus);

/// The other work on one host over an interval. Cores are seconds of CPU time per second of
/// the interval: busy_cores (every process), own_cores (this job's ranks there), other_cores =
/// max(0, busy - own) (the rest: other users' work, the launcher, the kernel's threads), and
/// resolution_cores = cpus x tick / interval, the most /proc/stat's tick counting can be off.
struct HostLoad {
  std::string host;  // the host name of its lowest rank
  int cpus = 0, ranks = 0;
  double interval_s = 0, busy_cores = 0, own_cores = 0, other_cores = 0, resolution_cores = 0;
};

/// The arithmetic of one host: busy_s the host's busy CPU seconds over the interval, own_s the
/// sum of its ranks' CPU seconds, interval_s > 0 the wall time, tick_s /proc/stat's tick.
HostLoad host_load(double busy_s, double own_s, double interval_s, int cpus, int ranks, double tick_s);

/// Other work worth saying: at least kOtherWorkNoted cores and twice the tick resolution.
inline constexpr double kOtherWorkNoted = 0.25;
bool other_work_noted(const HostLoad& h);

/// The world's ranks grouped by host, collective over `world` (one all_gather): per world rank the
/// index of its host (0, 1, ... in the order of each host's lowest rank), hosts told apart by the
/// kernel's boot id (/proc/sys/kernel/random/boot_id: ranks in network or UTS namespaces of one
/// machine share its /proc/stat and its steady_clock, so they count as one host); `names`, when
/// given, gets each host's name (gethostname of its lowest rank).
std::vector<int> host_indices(Communicator& world, std::vector<std::string>* names = nullptr);

/// A measurement over an interval, collective over `world` (every rank constructs and stops it,
/// in the same order as the world's other collectives); its hosts are host_indices'.
class LoadMeter {
 public:
  /// Reads the counters and finds each rank's host (one all_gather).
  explicit LoadMeter(Communicator& world);
  /// Per host, the other work since construction (one all_gather); every rank gets the same.
  /// Empty where no host's /proc/stat was readable.
  std::vector<HostLoad> stop();

 private:
  Communicator& world_;
  std::vector<std::string> host_names_;  // per host
  std::vector<int> host_of_;             // per world rank: the index of its host
  CpuCounters start_;
};

/// The report's form (suites[].host_load, docs/report.md): {"interval_s", "other_cores" (the
/// most over hosts), "hosts": [{host, cpus, ranks, busy_cores, own_cores, other_cores,
/// resolution_cores}]}; null for no hosts.
nlohmann::json host_load_json(const std::vector<HostLoad>& hosts);

/// One line for a person when other work was worth saying on some host, else "": e.g. "other
/// work on host vm: 1.85 of 2 cores' worth (this job's 4 ranks: 0.12) over 8.9 s".
std::string other_work_line(const std::vector<HostLoad>& hosts);

}  // namespace dtb
