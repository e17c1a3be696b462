// The communication watchdog's messages (kernels/comm/watchdog.h): a stuck call and who has not
// arrived at it, a rank that is gone, as this node's board (kernels/comm/watchdog_board.h) and
// /proc show them; ranks on other nodes are named by host only.
#pragma once
#include <string>

#include "kernels/comm/watchdog.h"
#include "kernels/comm/watchdog_board.h"

namespace dtb::watchdog {

/// `s` seconds as "1.2 s".
std::string seconds_text(double s);

/// The ranks on this node whose process has exited or is stopped, as "; rank 2 (pid 5474)
/// had exited" (empty when none): what a signal from the launcher follows (Open MPI's mpirun
/// sends SIGTERM to every rank once one dies). Ranks that took a signal themselves (their
/// ending_signal set) are not named: they exited because the launcher ended them.
std::string gone_peers(const Board& b);

/// This rank's call `v` as a sentence: "all_reduce on group 'world' (world ranks 0,1,2,3)"
/// and, for a send or receive, its peer.
std::string call_text(const CommGroupInfo& g, const SlotView& v);

/// Who has not arrived at this rank's call `v` ("; not arrived: ...; on other nodes, not visible
/// from here: ...; arrived: ..." or, for a send or receive, "; peer: ..."): this node's ranks from
/// the board, other nodes' by host.
std::string arrivals_text(const Board& b, const CommGroupInfo& g, const SlotView& v);

/// Whether every rank that keeps this rank's call `v` waiting is on another node (none of this
/// node's is missing, and one of another node's may be): then a lost node may be the cause.
bool waits_only_on_other_nodes(const Board& b, const CommGroupInfo& g, const SlotView& v);

}  // namespace dtb::watchdog
