// The one reader of a section's DP sync keys; see dp_sync_json.h.
#include "reference/layout/dp_sync_json.h"

#include "reference/json_keys.h"
#include "reference/layout/layout_spec.h"

namespace dtb {

void dp_sync_from_json(const nlohmann::json& s, const std::string& path, DpSync& d) {
  auto key = [&](LayoutKey k) { return std::string(spelling(k).config_key); };
  const std::string stale = key(LayoutKey::staleness), dc = key(LayoutKey::delay_compensation);
  const std::string local = key(LayoutKey::local_steps);
  if (s.contains(stale)) d.staleness = int(int_in_range(s, stale, path + "." + stale, 0, 1 << 20));
  if (s.contains(dc)) d.delay_compensation = number_in_range(s, dc, path + "." + dc, 0.0, 1e6);
  if (s.contains(local)) d.local_steps = int(int_in_range(s, local, path + "." + local, 0, 1 << 20));
  if (s.contains("outer_lr")) d.outer_lr = number_in_range(s, "outer_lr", path + ".outer_lr", 1e-12, 1e3);
  if (s.contains("outer_momentum"))
    d.outer_momentum = number_in_range(s, "outer_momentum", path + ".outer_momentum", 0.0, 0.999999);
}

}  // namespace dtb
