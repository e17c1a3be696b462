// What the model subcommands' option handling and text reports share (`dtbench memory`,
// harness/memory_cli.h; `dtbench plan`, harness/plan_cli.h): printf into a string, whether an
// option was given, a layout option's flag.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "reference/layout/layout_spec.h"

namespace dtb::cli {

/// printf-style formatting into a std::string of any length (vsnprintf twice).
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));

/// Whether option `opt` ("--tp") was given on subcommand `sub`.
inline bool given(const CLI::App& sub, const char* opt) { return sub.count(opt) > 0; }

/// A layout option's flag, from the one table of layout spellings (reference/layout/layout_spec.h).
inline const char* flag(LayoutKey k) { return spelling(k).memory_flag; }

}  // namespace dtb::cli
