// What the model subcommands' option handling and text reports share (`dtbench memory`,
// harness/memory_cli.h; `dtbench plan`, harness/plan_cli.h): printf into a string, whether an
// option was given, a layout option's flag.
#pragma once
#include <string>

#include "reference/layout/layout_spec.h"

// CLI11's App, declared: its header costs each file that includes it about 6 s of compile
// (g++ -O2, 2026-12-07), so only the files that build or read the options include it.
namespace CLI {
class App;
}

namespace dtb::cli {

/// printf-style formatting into a std::string of any length (vsnprintf twice).
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));

/// Whether option `opt` ("--tp") was given on subcommand `sub`.
bool given(const CLI::App& sub, const char* opt);

/// A layout option's flag, from the one table of layout spellings (reference/layout/layout_spec.h).
inline const char* flag(LayoutKey k) { return spelling(k).memory_flag; }

}  // namespace dtb::cli
