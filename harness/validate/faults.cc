// The --inject parser (test-only faults of `dtbench validate`; see faults.h).
#include "harness/validate/faults.h"

#include <cmath>
#include <cstdlib>

#include "kernels/error.h"

namespace dtb {

Injection parse_injection(const std::string& spec, int world_size) {
  Injection inj;
  if (spec.empty()) return inj;
  if (const size_t dash = spec.find('-', 1); dash != std::string::npos && dash < spec.find(':')) {
    if (spec.find(':') == std::string::npos) throw InputError("--inject: '" + spec + "' is not A-B:comm:FACTOR");
    // "A-B:comm:FACTOR": one link between two ranks, parsed as "A:comm:FACTOR" with B beside it.
    const std::string b = spec.substr(dash + 1, spec.find(':') - dash - 1);
    char* e = nullptr;
    const long rb = std::strtol(b.c_str(), &e, 10);
    if (b.empty() || *e != '\0' || rb < 0 || rb >= world_size)
      throw InputError("--inject: '" + b + "' in '" + spec + "' is not a rank in [0, " + std::to_string(world_size) + ")");
    Injection one = parse_injection(spec.substr(0, dash) + spec.substr(spec.find(':')), world_size);
    if (one.hang || one.compute != 1.0 || spec.find(":comm:") == std::string::npos)
      throw InputError("--inject: '" + spec + "': a pair of ranks takes only comm (A-B:comm:FACTOR)");
    if (one.rank == int(rb)) throw InputError("--inject: '" + spec + "' names one rank twice (A-B needs A != B)");
    one.link_a = one.rank, one.link_b = int(rb), one.rank = -1;
    return one;
  }
  const size_t a = spec.find(':'), b = spec.find(':', a == std::string::npos ? a : a + 1);
  char* e = nullptr;
  const std::string rank = a == std::string::npos ? spec : spec.substr(0, a);
  const long r = std::strtol(rank.c_str(), &e, 10);
  const std::string bare = a == std::string::npos || b != std::string::npos ? "" : spec.substr(a + 1);
  if ((bare == "hang" || bare == "sdc") && !rank.empty() && *e == '\0') {
    if (r < 0 || r >= world_size)
      throw InputError("--inject: rank " + rank + " is not in [0, " + std::to_string(world_size) + ")");
    inj.rank = int(r);
    (bare == "hang" ? inj.hang : inj.sdc) = true;
    return inj;
  }
  if (a == std::string::npos || b == std::string::npos || rank.empty() || *e != '\0')
    throw InputError("--inject: '" + spec + "' is not RANK:compute:FACTOR, RANK:comm:FACTOR, RANK:hang or RANK:sdc");
  if (r < 0 || r >= world_size)
    throw InputError("--inject: rank " + rank + " is not in [0, " + std::to_string(world_size) + ")");
  const std::string kind = spec.substr(a + 1, b - a - 1);
  if (kind != "compute" && kind != "comm")
    throw InputError(kind == "hang" || kind == "sdc"
                         ? "--inject: '" + kind + "' takes no factor (RANK:" + kind + ")"
                         : "--inject: '" + kind + "' is not a fault this build injects (compute, comm, hang, sdc)");
  const std::string f = spec.substr(b + 1);
  const double factor = std::strtod(f.c_str(), &e);
  if (f.empty() || *e != '\0' || !std::isfinite(factor) || factor < 1)
    throw InputError("--inject: factor '" + f + "' is not a number >= 1");
  inj.rank = int(r);
  (kind == "compute" ? inj.compute : inj.comm) = factor;
  return inj;
}

}  // namespace dtb
