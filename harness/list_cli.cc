// `dtbench list`; see harness/list_cli.h.
#include "harness/list_cli.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "harness/config.h"
#include "kernels/error.h"
#include "reference/layout/layout_spec.h"
#include "suites/suite.h"

namespace dtb {

using nlohmann::json;

namespace {
// `dtbench list --layout-keys [--json]`: the layout keys' spellings (reference/layout/layout_spec.h),
// as a table or as layout_spellings_json (what scripts/ read instead of spelling the keys).
int cmd_list_layout_keys(bool as_json) {
  if (as_json) {
    std::printf("%s\n", layout_spellings_json().dump(1).c_str());
    return 0;
  }
  auto col = [](const char* s) { return *s ? s : "-"; };
  std::printf("%-19s %-24s %-8s %-13s %-24s %s\n", "key", "config key", "spec", "name key", "field key", "memory flag");
  for (const LayoutSpelling& s : layout_spellings())
    std::printf("%-19s %-24s %-8s %-13s %-24s %s\n", key_name(s.key), col(s.config_key), col(s.spec_token),
                col(s.name_key), col(s.field_key), col(s.memory_flag));
  return 0;
}
}  // namespace

int cmd_list(Communicator& world, bool layout_keys, bool as_json) {
  if (world.rank() != 0) return 0;
  if (as_json && !layout_keys) throw InputError("list --json: only with --layout-keys");
  if (layout_keys) return cmd_list_layout_keys(as_json);
  std::printf("suites:\n");
  for (const auto& [name, f] : suite_registry()) std::printf("  %-14s %s\n", name.c_str(), f()->description().c_str());
  std::printf("configs (%s):\n", config_dir().c_str());
  for (const auto& n : config_names()) {
    std::string what;
    try {  // the description, when the file is a JSON object that has one
      const json c = json::parse(read_config_text(n));
      if (c.is_object() && c.contains("description") && c["description"].is_string()) what = c["description"];
    } catch (const std::exception&) {
      what = "(unreadable: dtbench run --config " + n + " says why)";
    }
    std::printf("  %-22s %s\n", n.c_str(), what.c_str());
  }
  return 0;
}

}  // namespace dtb
