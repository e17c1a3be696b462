// Other work on the run's hosts; see host_load.h.
#include "suites/host_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels/error.h"
#include "kernels/timer.h"

namespace dtb {

bool parse_proc_stat(const std::string& text, double& busy_ticks, int& cpus) {
  std::istringstream in(text);
  std::string line;
  bool found = false;
  busy_ticks = 0, cpus = 0;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    if (line.size() > 3 && line[3] >= '0' && line[3] <= '9') {
      ++cpus;
      continue;
    }
    if (line.size() < 4 || line[3] != ' ' || found) continue;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice (proc(5))
    std::istringstream f(line.substr(3));
    std::vector<double> v;
    for (double x; f >> x;) v.push_back(x);
    if (v.size() < 4) return false;
    v.resize(10, 0.0);
    busy_ticks = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    found = true;
  }
  return found;
}

CpuCounters read_cpu_counters() {
  CpuCounters c;
  c.wall_s = now_seconds();
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    c.process_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  const long hz = sysconf(_SC_CLK_TCK);
  c.tick_s = hz > 0 ? 1.0 / double(hz) : 0.01;
  std::ifstream f("/proc/stat");
  if (!f) return c;
  std::stringstream text;
  text << f.rdbuf();
  double ticks = 0;
  c.host_known = parse_proc_stat(text.str(), ticks, c.host_cpus);
  c.host_busy_s = ticks * c.tick_s;
  return c;
}

HostLoad host_load(double busy_s, double own_s, double interval_s, int cpus, int ranks, double tick_s) {
  HostLoad h;
  h.cpus = cpus, h.ranks = ranks, h.interval_s = interval_s;
  if (!(interval_s > 0)) return h;
  h.busy_cores = std::max(0.0, busy_s) / interval_s;
  h.own_cores = std::max(0.0, own_s) / interval_s;
  h.other_cores = std::max(0.0, busy_s - own_s) / interval_s;
  h.resolution_cores = cpus * tick_s / interval_s;
  return h;
}

bool other_work_noted(const HostLoad& h) {
  return h.other_cores >= kOtherWorkNoted && h.other_cores >= 2 * h.resolution_cores;
}

namespace {

// This rank's host key (the boot id: one per running kernel) and its host name, in a fixed
// 32-int buffer: 48 bytes of boot id, then 80 of host name, NUL-padded.
constexpr int kKeyInts = 32, kIdBytes = 48;
void host_key(int32_t* out) {
  char buf[kKeyInts * 4] = {};
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (f) std::getline(f, id);
  const char* src = id.empty() ? "?" : id.c_str();
  std::memcpy(buf, src, std::min<size_t>(std::strlen(src), kIdBytes - 1));
  gethostname(buf + kIdBytes, sizeof buf - kIdBytes - 1);
  buf[sizeof buf - 1] = 0;
  std::memcpy(out, buf, sizeof buf);
}

}  // namespace

std::vector<int> host_indices(Communicator& world, std::vector<std::string>* names) {
  const int n = world.size();
  std::vector<int32_t> mine(kKeyInts), all(size_t(kKeyInts) * n);
  host_key(mine.data());
  world.all_gather(mine.data(), all.data(), kKeyInts, DType::i32);
  std::vector<std::string> keys;
  std::vector<int> out;
  for (int r = 0; r < n; ++r) {
    const char* b = reinterpret_cast<const char*>(all.data() + size_t(kKeyInts) * r);
    const std::string key(b, strnlen(b, kIdBytes));
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      if (names) names->emplace_back(b + kIdBytes, strnlen(b + kIdBytes, kKeyInts * 4 - kIdBytes));
      it = keys.end() - 1;
    }
    out.push_back(int(it - keys.begin()));
  }
  return out;
}

LoadMeter::LoadMeter(Communicator& world) : world_(world), host_of_(host_indices(world, &host_names_)) {
  start_ = read_cpu_counters();
}

std::vector<HostLoad> LoadMeter::stop() {
  const CpuCounters end = read_cpu_counters();
  const int n = world_.size();
  // Per rank: host busy delta (or -1: unknown), own CPU delta, wall delta, cpus, tick.
  double mine[5] = {start_.host_known && end.host_known ? end.host_busy_s - start_.host_busy_s : -1.0,
                    end.process_s - start_.process_s, end.wall_s - start_.wall_s, double(end.host_cpus), end.tick_s};
  std::vector<double> all(size_t(5) * n);
  world_.all_gather(mine, all.data(), 5, DType::f64);
  std::vector<HostLoad> out;
  for (size_t h = 0; h < host_names_.size(); ++h) {
    double own = 0, busy = -1, wall = 0, cpus = 0, tick = 0.01;
    int ranks = 0;
    for (int r = 0; r < n; ++r) {
      if (host_of_[size_t(r)] != int(h)) continue;
      const double* x = &all[size_t(5) * r];
      own += x[1], ++ranks;
      if (busy < 0 && x[0] >= 0)  // the host's figures from its lowest rank that could read them
        busy = x[0], wall = x[2], cpus = x[3], tick = x[4];
    }
    if (busy < 0) continue;
    HostLoad l = host_load(busy, own, wall, int(cpus), ranks, tick);
    l.host = host_names_[h];
    out.push_back(l);
  }
  return out;
}

nlohmann::json host_load_json(const std::vector<HostLoad>& hosts) {
  if (hosts.empty()) return nullptr;
  nlohmann::json list = nlohmann::json::array();
  double most = 0, interval = 0;
  for (const HostLoad& h : hosts) {
    list.push_back({{"host", h.host}, {"cpus", h.cpus}, {"ranks", h.ranks}, {"busy_cores", h.busy_cores},
                    {"own_cores", h.own_cores}, {"other_cores", h.other_cores},
                    {"resolution_cores", h.resolution_cores}});
    most = std::max(most, h.other_cores), interval = std::max(interval, h.interval_s);
  }
  return {{"interval_s", interval}, {"other_cores", most}, {"hosts", list}};
}

std::string other_work_line(const std::vector<HostLoad>& hosts) {
  std::string out;
  for (const HostLoad& h : hosts) {
    if (!other_work_noted(h)) continue;
    char b[256];
    std::snprintf(b, sizeof b,
                  "%sother work on host %s: %.2f of %d cores' worth (this job's %d rank%s: %.2f) over %.1f s",
                  out.empty() ? "" : "; ", printable(h.host, 40).c_str(), h.other_cores, h.cpus, h.ranks,
                  h.ranks == 1 ? "" : "s", h.own_cores, h.interval_s);
    out += b;
  }
  return out;
}

}  // namespace dtb
