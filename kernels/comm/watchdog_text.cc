// The communication watchdog's messages (kernels/comm/watchdog_text.h).
#include "kernels/comm/watchdog_text.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

namespace dtb::watchdog {
namespace {

std::string op_text(int32_t op) {
  if (op >= kAsyncWait) return std::string(comm_op_name(CommOp(op - kAsyncWait))) + " (async wait)";
  return comm_op_name(CommOp(op));
}


std::string ranks_text(const std::vector<int>& r) {
  std::string out;
  for (size_t i = 0; i < r.size() && i < 16; ++i) {
    if (i) out += ',';
    out += std::to_string(r[i]);
  }
  if (r.size() > 16) out += ",... (" + std::to_string(r.size()) + " ranks)";
  return out;
}

/// The process state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z' zombie ...), or
/// 0 when the process is gone.
char process_state(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return 0;
  const size_t close = line.rfind(')');  // the command name may hold spaces
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

/// What world rank `w` is doing, as seen from this node's board, and whether it sits in
/// `op` on group `id`.
struct PeerState {
  bool arrived = false;
  std::string text;
};

PeerState peer_state(const Board& b, int w, uint64_t id, int32_t op, int64_t now) {
  const Place& p = b.places[size_t(w)];
  if (p.node != b.places[size_t(b.world_rank)].node) return {false, ""};  // another node: remote_text() names it
  const Slot& s = *b.local[size_t(p.local)];
  const SlotView v = read_slot(s);
  const char st = process_state(p.pid);
  const std::string who = "rank " + std::to_string(w) + " (pid " + std::to_string(p.pid);
  if (st == 0 || st == 'Z' || st == 'X') return {false, who + ": exited)"};
  if (st == 'T' || st == 't') return {false, who + ": stopped)"};
  const double ago = double(now - v.t_ns) * 1e-9;
  const std::string named = name_in(s, v.group), gname = named.empty() ? std::string("?") : named;
  if (v.active && v.group == id && v.op == op) return {true, "rank " + std::to_string(w)};
  if (v.active && v.group == id)
    return {false, who + ": in " + op_text(v.op) + " on the same group for " + seconds_text(ago) +
                       ", a mismatched call)"};
  if (v.active)
    return {false, who + ": in " + op_text(v.op) + " on group '" + gname + "' for " + seconds_text(ago) + ")"};
  if (v.t_ns == 0 || v.op == 0) return {false, who + ": computing or hung, no MPI call yet)"};
  return {false, who + ": computing or hung, no MPI call since its last one (" + op_text(v.op) + " on group '" +
                     gname + "') began " + seconds_text(ago) + " ago)"};
}


/// Ranks on other nodes, by host, as "ranks 2,3 on dtbh2, rank 4 on dtbh3": their processes and
/// calls are on their own node's board, so from this node they can only be named with their host
/// (from the hostnames gathered at start), not said to have arrived or not.
std::string remote_text(const Board& b, const std::vector<int>& ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int w : ranks) {
    const std::string& h = b.hosts[size_t(w)];
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) { return e.first == h; });
    if (it == by_host.end()) by_host.push_back({h, {w}});
    else it->second.push_back(w);
  }
  std::string out;
  for (const auto& [h, rs] : by_host)
    out += (out.empty() ? "" : ", ") + std::string(rs.size() > 1 ? "ranks " : "rank ") + ranks_text(rs) + " on " + h;
  return out;
}

}  // namespace

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

/// The ranks on this node whose process has exited or is stopped, as "; rank 2 (pid 5474)
/// had exited" (empty when none): what a signal from the launcher follows (Open MPI's mpirun
/// sends SIGTERM to every rank once one dies). Ranks that took a signal themselves (their
/// ending_signal set) are not named: they exited because the launcher ended them.
std::string gone_peers(const Board& b) {
  std::string out;
  for (int w = 0; w < b.world_size; ++w) {
    const Place& p = b.places[size_t(w)];
    if (w == b.world_rank || p.node != b.places[size_t(b.world_rank)].node) continue;
    if (b.local[size_t(p.local)]->ending_signal.load(std::memory_order_acquire) != 0) continue;  // ended by a signal
    const char st = process_state(p.pid);
    const std::string who = "rank " + std::to_string(w) + " (pid " + std::to_string(p.pid) + ")";
    if (st == 0 || st == 'Z' || st == 'X') out += "; " + who + " had exited";
    else if (st == 'T' || st == 't') out += "; " + who + " was stopped";
  }
  return out;
}

/// This rank's call `v` as a sentence: "all_reduce on group 'world' (world ranks 0,1,2,3)"
/// and, for a send or receive, its peer.
std::string call_text(const CommGroupInfo& g, const SlotView& v) {
  const CommOp base = CommOp(v.op >= kAsyncWait ? v.op - kAsyncWait : v.op);
  std::string msg = op_text(v.op) + " on group '" + g.name + "' (world ranks " + ranks_text(g.world_ranks) + ")";
  const bool p2p = base == CommOp::send || base == CommOp::recv || base == CommOp::sendrecv;
  if (p2p && v.peer >= 0 && size_t(v.peer) < g.world_ranks.size())
    msg += (base == CommOp::recv ? " from rank " : base == CommOp::send ? " to rank " : " with rank ") +
           std::to_string(g.world_ranks[size_t(v.peer)]);
  return msg;
}

/// Who has not arrived at this rank's call `v` ("; not arrived: ...; on other nodes, not visible
/// from here: ...; arrived: ..." or, for a send or receive, "; peer: ..."): this node's ranks from
/// the board, other nodes' by host.
std::string arrivals_text(const Board& b, const CommGroupInfo& g, const SlotView& v) {
  const int64_t now = now_ns();
  const CommOp base = CommOp(v.op >= kAsyncWait ? v.op - kAsyncWait : v.op);
  const bool p2p = base == CommOp::send || base == CommOp::recv || base == CommOp::sendrecv;
  std::vector<std::string> missing;
  std::vector<int> arrived, remote;
  auto add = [&](int w, const PeerState& p) {
    if (p.arrived) arrived.push_back(w);
    else if (p.text.empty()) remote.push_back(w);
    else missing.push_back(p.text);
  };
  if (p2p && v.peer >= 0 && size_t(v.peer) < g.world_ranks.size()) {
    const int w = g.world_ranks[size_t(v.peer)];
    add(w, peer_state(b, w, 0, -1, now));  // a peer never "arrives" at a p2p call
  } else {
    for (int w : g.world_ranks) {
      if (w == b.world_rank) arrived.push_back(w);
      else add(w, peer_state(b, w, v.group, v.op, now));
    }
  }
  std::string msg;
  if (!missing.empty()) {
    msg += p2p ? "; peer: " : "; not arrived: ";
    for (size_t i = 0; i < missing.size(); ++i) msg += (i ? ", " : "") + missing[i];
  }
  if (!remote.empty())
    msg += (p2p ? "; peer: " : "; on other nodes, not visible from here: ") + remote_text(b, remote) +
           (p2p ? " (another node: not visible from here)" : "");
  if (!p2p) msg += "; arrived: " + (arrived.empty() ? std::string("none") : ranks_text(arrived));
  return msg;
}

/// Whether every rank that keeps this rank's call `v` waiting is on another node (none of this
/// node's is missing, and one of another node's may be): then a lost node may be the cause.
bool waits_only_on_other_nodes(const Board& b, const CommGroupInfo& g, const SlotView& v) {
  const CommOp base = CommOp(v.op >= kAsyncWait ? v.op - kAsyncWait : v.op);
  const bool p2p = base == CommOp::send || base == CommOp::recv || base == CommOp::sendrecv;
  std::vector<int> waited;
  if (p2p && v.peer >= 0 && size_t(v.peer) < g.world_ranks.size()) waited.push_back(g.world_ranks[size_t(v.peer)]);
  else if (!p2p) waited = g.world_ranks;
  const int64_t now = now_ns();
  bool remote = false;
  for (int w : waited) {
    if (w == b.world_rank || w < 0 || w >= b.world_size) continue;
    const PeerState p = peer_state(b, w, v.group, v.op, now);
    if (p.text.empty() && !p.arrived) remote = true;
    else if (!p.arrived || p2p) return false;
  }
  return remote;
}

}  // namespace dtb::watchdog
