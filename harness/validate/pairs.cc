// The point-to-point probes of `dtbench validate` (see pairs.h): exchanges with a deadline,
// sweeps of pair rounds with retests, bandwidth matrices and the alpha-beta fit.
#include "harness/validate/pairs.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "harness/validate/format.h"
#include "harness/validate/inventory.h"
#include "kernels/error.h"
#include "suites/bandwidth.h"
#include "suites/stats.h"

namespace dtb {

using nlohmann::json;
using namespace validate_detail;

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n) {
  // Circle method: position 0 fixed, the others rotate; with odd n a dummy (n) sits out.
  const int m = n % 2 ? n + 1 : n;
  std::vector<int> pos(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) pos[size_t(i)] = i;
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (int r = 0; r < m - 1; ++r) {
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < m / 2; ++i) {
      const int a = pos[size_t(i)], b = pos[size_t(m - 1 - i)];
      if (a < n && b < n) pairs.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(pairs);
    std::rotate(pos.begin() + 1, pos.end() - 1, pos.end());
  }
  return rounds;
}

// The latency-bandwidth model t(n) = alpha + n / beta fitted by weighted least squares to
// (bytes, seconds) points (Hockney's model, the alpha-beta of the MPI literature), each point
// weighted by 1 / t^2 so that the residuals are relative: plain least squares lets the
// largest message's microseconds of noise swamp the smallest's whole time, and alpha came out
// negative so. Alpha in seconds, beta in bytes/s. Needs two distinct sizes; {0, 0} otherwise.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& pts) {
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    const double w = y > 0 ? 1.0 / (y * y) : 0.0;
    s += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double den = s * sxx - sx * sx;
  if (pts.size() < 2 || !(den > 0)) return {0, 0};
  const double slope = (s * sxy - sx * sy) / den;
  return {(sy - slope * sx) / s, slope > 0 ? 1.0 / slope : 0.0};
}

namespace {

// Sends `bytes` (a multiple of 4: they travel as i32 words) from s to `partner` of `world` and
// receives as many into r: recv_async and send_async, polled with test() until both are done or
// `until` (no call stays on the watchdog's board meanwhile, so the step's timeout, not the
// watchdog, names a stuck pair). False when the deadline passed: the handles and buffers are
// then abandoned, never waited for (leaked: the run ends at the next step's barrier).
bool exchange(Communicator& world, int partner, std::vector<char>& s, std::vector<char>& r, size_t bytes, int tag,
              std::chrono::steady_clock::time_point until) {
  DTB_CHECK(bytes % 4 == 0 && bytes <= s.size() && bytes <= r.size(), "validate: exchange of " + std::to_string(bytes) +
                                                                          " bytes");
  auto rq = world.recv_async(r.data(), bytes / 4, DType::i32, partner, tag);
  auto sq = world.send_async(s.data(), bytes / 4, DType::i32, partner, tag);
  for (;;) {
    const bool received = rq->test(), sent = sq->test();
    if (received && sent) return true;
    if (std::chrono::steady_clock::now() > until) {
      (void)rq.release(), (void)sq.release();  // still in flight: never waited for
      new std::vector<char>(std::move(s));     // still the library's
      new std::vector<char>(std::move(r));
      return false;
    }
  }
}

// The best time of a bidirectional exchange of each of kPairSizes with `partner` (11 repetitions,
// the first a warm-up), seconds: each side times its own transfer, then both swap their times
// (an 8-byte exchange, not timed) and keep the longer. `factor` > 1 (--inject, both sides of a
// pair with the slowed rank) emulates a link that many times slower: the time is factor x the
// longer, and both sides spin until it has passed since the start, then swap once more (so the
// next transfer starts together). Empty when a transfer did not finish by `until`.
std::vector<double> pair_times(Communicator& world, int partner, double factor, std::chrono::steady_clock::time_point until) {
  std::vector<double> best;
  std::vector<char> sbuf(kPairSizes.back(), 1), rbuf(kPairSizes.back());
  std::vector<char> mine(sizeof(double)), theirs(sizeof(double));
  auto swap = [&](double t) {
    std::memcpy(mine.data(), &t, sizeof t);
    if (!exchange(world, partner, mine, theirs, sizeof t, 8, until)) return -1.0;
    double v;
    std::memcpy(&v, theirs.data(), sizeof v);
    return v;
  };
  for (size_t bytes : kPairSizes) {
    double b = 1e300;
    for (int rep = 0; rep < 11; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!exchange(world, partner, sbuf, rbuf, bytes, 7, until)) return {};
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double other = swap(dt);
      if (other < 0) return {};
      if (factor > 1) {
        spin_until(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(factor * std::max(dt, other))));
        if (swap(0.0) < 0) return {};
      }
      // The longer side's transfer (both sides keep the same figure), stretched by the fault.
      if (rep > 0) b = std::min(b, std::max(dt, other) * std::max(factor, 1.0));
    }
    best.push_back(b);
  }
  return best;
}

}  // namespace

PairSweep sweep_pairs(Communicator& world, const std::vector<std::vector<std::pair<int, int>>>& rounds,
                      const std::vector<json>& inv, const Injection& inj, Steps& steps, const std::string& check) {
  const int rank = world.rank();
  const size_t n = inv.size();
  PairSweep out{std::vector<std::vector<double>>(kPairSizes.size(), std::vector<double>(n, 0.0)), {{}, {}}};
  int stuck = -1;  // the partner of a transfer that timed out
  // Pairs sharing a machine take turns (hosts in network namespaces of one kernel share it).
  const std::vector<std::string> machine = machine_of_rank(inv);
  auto machine_of = [&](int r) { return machine[size_t(r)]; };
  auto run = [&](const std::vector<std::vector<std::pair<int, int>>>& rs) {
    for (const auto& round : rs) {
      std::vector<int> slot(round.size(), 0);
      int slots = 1;
      for (size_t i = 0; i < round.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          const std::set<std::string> hi = {machine_of(round[i].first), machine_of(round[i].second)};
          if (hi.count(machine_of(round[j].first)) || hi.count(machine_of(round[j].second)))
            slot[i] = std::max(slot[i], slot[j] + 1);
        }
        slots = std::max(slots, slot[i] + 1);
      }
      for (int k = 0; k < slots; ++k) {
        steps.arrive(check, stuck);
        for (size_t i = 0; i < round.size(); ++i) {
          const auto [x, y] = round[i];
          if (slot[i] != k || (x != rank && y != rank)) continue;
          const int partner = x == rank ? y : x;
          const std::vector<double> t = pair_times(world, partner, inj.comm_factor(rank, partner), steps.deadline());
          if (t.empty()) {
            stuck = partner;
            continue;
          }
          for (size_t s = 0; s < t.size(); ++s) {
            double& cell = out.seconds[s][size_t(partner)];
            cell = cell > 0 ? std::min(cell, t[s]) : t[s];
          }
        }
      }
    }
  };
  for (int sweep = 0; sweep < 3; ++sweep) run(rounds);
  // Retest before blaming: a pair more than 25% slower than the upper quartile is measured again,
  // twice, after a 100 ms pause of every rank, keeping its best. Two ranks that the scheduler
  // put on one core for a while measure half their bandwidth for that while (seen on a 2-core
  // machine running 4 ranks: one pair in three runs at half speed in all three sweeps, a
  // moment later at full speed); a slow link or rank measures slow again.
  for (int retest = 0; retest < 2; ++retest) {
    steps.arrive(check, stuck);
    std::vector<double> m(n * n);
    world.all_gather(out.seconds.back().data(), m.data(), n, DType::f64);
    std::vector<std::pair<int, int>> measured;
    std::vector<double> t;
    std::vector<bool> intra;
    for (size_t x = 0; x < n; ++x)
      for (size_t y = x + 1; y < n; ++y)
        if (m[x * n + y] > 0 && m[y * n + x] > 0) {
          measured.emplace_back(int(x), int(y));
          t.push_back(std::max(m[x * n + y], m[y * n + x]));
          intra.push_back(inv[x].value("node", "?") == inv[y].value("node", "?"));
        }
    // The reference is the upper quartile's time of the pair's link class (intra-node,
    // inter-node), not the median's: a slow rank's pairs (n - 1 of them) would otherwise pull the
    // median down to their own speed, and an intra-node pair is not measured against the slower
    // inter-node links (pairs/links judges each class on its own, so suspects are chosen so too).
    double ref[2] = {0, 0};
    for (int cls = 0; cls < 2; ++cls) {
      std::vector<double> sorted;
      for (size_t i = 0; i < t.size(); ++i)
        if (intra[i] == bool(cls)) sorted.push_back(t[i]);
      std::sort(sorted.begin(), sorted.end());
      ref[cls] = sorted.empty() ? 0.0 : sorted[sorted.size() / 4];
    }
    std::vector<std::vector<std::pair<int, int>>> again;  // the suspects, packed into disjoint rounds
    for (size_t i = 0; i < measured.size(); ++i) {
      if (!(t[i] > ref[intra[i] ? 1 : 0] / 0.75)) continue;
      const int x = measured[i].first, y = measured[i].second;
      auto fits = [&](const std::vector<std::pair<int, int>>& r) {
        return std::none_of(r.begin(), r.end(), [&](const auto& q) {
          return q.first == x || q.second == x || q.first == y || q.second == y;
        });
      };
      auto it = std::find_if(again.begin(), again.end(), fits);
      if (it == again.end()) again.push_back({measured[i]});
      else it->push_back(measured[i]);
    }
    if (again.empty()) break;
    for (const auto& r : again) out.retested[size_t(retest)].insert(out.retested[size_t(retest)].end(), r.begin(), r.end());
    usleep(100000);
    run(again);
  }
  steps.arrive(check, stuck);
  return out;
}


json bandwidth_matrix_json(const std::vector<double>& m, int n, size_t bytes) {
  json j = json::array();
  for (int r = 0; r < n; ++r) {
    json row = json::array();
    for (int p = 0; p < n; ++p) {
      const double t = m[size_t(r) * size_t(n) + size_t(p)];
      row.push_back(t > 0 ? algbw_GBps(2 * bytes, t) : 0.0);  // both directions
    }
    j.push_back(row);
  }
  return j;
}

std::vector<double> median_bandwidth(const std::vector<double>& m, int n, size_t bytes) {
  std::vector<double> out;
  for (int r = 0; r < n; ++r) {
    std::vector<double> v;
    for (int p = 0; p < n; ++p)
      if (p != r && m[size_t(r) * size_t(n) + size_t(p)] > 0)
        v.push_back(algbw_GBps(2 * bytes, m[size_t(r) * size_t(n) + size_t(p)]));
    out.push_back(median(v));
  }
  return out;
}

ValidateCheck alpha_beta_check(const std::vector<std::vector<double>>& m_by_size,
                               const std::vector<std::string>& node_of_rank, const std::string& name) {
  const int n = int(node_of_rank.size());
  json classes = json::object();
  std::string text, bad;  // bad: the classes whose fit is not a number or whose beta is not positive
  for (const std::string cls : {"intra-node", "inter-node"}) {
    std::vector<std::pair<double, double>> pts;
    for (size_t s = 0; s < kPairSizes.size(); ++s) {
      std::vector<double> t;
      for (int r = 0; r < n; ++r)
        for (int p = r + 1; p < n; ++p) {
          const bool intra = node_of_rank[size_t(r)] == node_of_rank[size_t(p)];
          const double x = m_by_size[s][size_t(r) * size_t(n) + size_t(p)];
          if (x > 0 && intra == (cls == "intra-node")) t.push_back(x);
        }
      if (!t.empty()) pts.emplace_back(double(kPairSizes[s]), median(t));
    }
    if (pts.size() < 2) continue;
    const auto [alpha, beta] = fit_alpha_beta(pts);
    if (!std::isfinite(alpha) || !(beta > 0) || !std::isfinite(beta)) bad += (bad.empty() ? "" : ", ") + cls;
    json p = json::array();
    for (const auto& [b, t] : pts) p.push_back({{"bytes", b}, {"seconds", t}});
    classes[cls] = {{"alpha_us", alpha * 1e6}, {"beta_GBps", beta / 1e9}, {"points", p}};
    text += (text.empty() ? "" : "; ") + cls + ": alpha " + num_str(alpha * 1e6) + " us, beta " + num_str(beta / 1e9) +
            " GB/s each way";
  }
  // Called where pairs were measured: no class to fit, or a fit that is no figure, fails (closed).
  const bool failed = classes.empty() || !bad.empty();
  return ValidateCheck{name, failed ? "fail" : "pass",
                       classes.empty() ? "no pair measured at two sizes: nothing to fit, which fails"
                       : (!bad.empty() ? "no valid fit (not a number, or beta not positive) for " + bad + "; " : "") +
                             "t(n) = alpha + n / beta, relative least squares over " + std::to_string(kPairSizes.size()) +
                             " sizes of each pair's best: " + text,
                       {}, {}, {{"classes", classes}}, {}};
}

}  // namespace dtb
