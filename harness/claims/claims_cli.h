// `dtbench claims`: the command over harness/claims/claims.h: every catalog entry evaluated, the
// measured column from a report's records when --report is given; the table, or JSON.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace dtb {

/// The options of `dtbench claims`, as given (empty: not given).
struct ClaimsArgs {
  std::string catalog, report, output;
  bool json = false;
};

/// Adds the `claims` subcommand with its options bound to `args` (which must outlive `app`).
CLI::App* add_claims_subcommand(CLI::App& app, ClaimsArgs& args);

/// `dtbench claims`: every catalog entry evaluated (harness/claims/claims.h), the measured column from
/// REPORT's records when --report is given. Prints the table, or the JSON with --json; --output
/// also writes the JSON (scripts/report.py renders it); `sub` is the parsed subcommand. Prints
/// and writes on rank 0 (`root`) only. Returns 0. Errors: InputError (exit 2) for an empty
/// option, a bad catalog or report, an --output that cannot be written.
int cmd_claims(const CLI::App& sub, const ClaimsArgs& args, bool root);

}  // namespace dtb
