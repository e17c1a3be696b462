// The one reader of a config section's DP sync keys (reference/training/trainer.h DpSync): the
// train, conformance, sweep and comm_efficiency suites read staleness, delay_compensation,
// local_steps, outer_lr and outer_momentum through it, so that each key has one grammar and range
// (docs/config.md "Stale gradients and local steps"). Their combinations and the layouts they
// need are the layout validator's (reference/layout/layout_validate.h).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "reference/training/trainer.h"

namespace dtb {

/// Reads into `d` each DP sync key `section` has (an absent key leaves its field): staleness
/// [0, 2^20], delay_compensation [0, 1e6], local_steps [0, 2^20], outer_lr [1e-12, 1e3] (> 0,
/// as docs/config.md states), outer_momentum [0, 0.999999] ([0, 1)). Key names from the layout
/// spellings (reference/layout/layout_spec.h). Errors: InputError "<path>.<key> = <v> is out of
/// range [lo, hi]" or "<path>.<key>: ..." for a value of the wrong type (reference/json_keys.h).
void dp_sync_from_json(const nlohmann::json& section, const std::string& path, DpSync& d);

}  // namespace dtb
