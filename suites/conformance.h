// What the conformance suite (suites/conformance.cc) shares with tests.
#pragma once
#include <string>
#include <vector>

namespace dtb {

/// The layout specs the conformance suite runs when its section lists none: the dense model's
/// (`moe` false) or an MoE model's (`moe` true), in the order they run. Each is in
/// layout_spec_text's canonical form (reference/layout/layout_spec.h), and each names a record
/// ("conformance/<spec>").
const std::vector<std::string>& default_conformance_layouts(bool moe);

}  // namespace dtb
