// `dtbench list`: the suites and the named configs, or (--layout-keys) the layout keys' spellings.
#pragma once
#include "kernels/comm/communicator.h"

namespace dtb {

/// Prints, on rank 0 of `world`, the registered suites with their descriptions and the named
/// configs (harness/config.h config_names) with theirs; with `layout_keys` the layout keys'
/// spellings instead (reference/layout/layout_spec.h layout_spellings), as a table or, with
/// `as_json`, as layout_spellings_json (what scripts/dtbreport/layout_keys.json holds). Returns
/// 0. Errors: InputError "list --json: only with --layout-keys".
int cmd_list(Communicator& world, bool layout_keys, bool as_json);

}  // namespace dtb
