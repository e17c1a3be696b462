// `dtbench claims`: rules of thumb about memory and parallelism, each checked against
// dtbench's analytic models (reference/analytic/memory_model.h, reference/parallel/pipeline_schedule.h) and,
// where a report holds the measurement, against this machine's suites.
//
// The catalog (harness/claims/claims.json) is data: one entry per claim with the statement in our
// words, the figures it quotes, the conditions it assumes, the method (analytic, suite or
// both), the evaluator that checks it and the relative tolerance for "holds". Adding a claim
// is adding an entry, and, when no evaluator fits, one function and a line in claims_table.cc's table.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtb {

/// One evaluated claim: the table row of `dtbench claims`. GB = 1e9 bytes throughout, as the
/// claims use it.
struct ClaimResult {
  int id = 0;
  std::string claim;       // the statement, in our words
  std::string conditions;  // what it assumes (from the catalog)
  std::string method;      // "analytic", "suite" or "both"
  std::string predicted;   // the claim's own figures
  std::string computed;    // dtbench's analytic figures under the claim's conditions
  std::string measured;    // from the report's suites on this machine, or why not
  std::string verdict;     // "holds", "differs", "holds only if", "cannot measure here"
  std::string why;         // one line: the verdict's reason (which recipe, batch, m, ...)
  nlohmann::json values;   // the numbers behind the row (bytes, seconds, ratios)
};

/// Reads and checks a catalog: a JSON object {"claims": [entry...], "description": ...}, each
/// entry with integer "id" (unique, 1 to 1000000), one-line strings "claim", "figures",
/// "conditions", "method" (analytic | suite | both), "evaluator" (a name claims_table.cc
/// knows), number "tolerance" (relative, in (0, 10]) and an optional object "inputs" naming only
/// inputs its evaluator reads, each within its spec (claims_table.cc); no other key; at least
/// one entry. The file is read by read_input_file (at most 1 MiB) and parsed by
/// parse_json_input (a key twice refused). Errors: InputError naming the file and the entry.
nlohmann::json load_claims_catalog(const std::string& path);

/// The catalog in the repository: DTB_CLAIMS_CATALOG when set, else harness/claims/claims.json
/// beside the source tree this binary was built from.
std::string default_claims_catalog();

/// Evaluates every entry of a catalog load_claims_catalog accepted. `report` (may be null) is a
/// dtbench report (summarize_report accepted it) whose records supply the "measured" column:
/// the all_reduce's busbw, the pipeline's bubble_measured, overlap gain, recompute overhead and
/// activation_saving, the checkpoint interval's save cost, comm_efficiency's speed-ups; each
/// field read is checked for its type first. `report_source` names the report in messages.
/// Errors: InputError "report SOURCE: record NAME: \"KEY\" must be ..." for a field of the wrong
/// type or sign; "claims: entry N (evaluator E): ..." for an input its model refuses.
std::vector<ClaimResult> evaluate_claims(const nlohmann::json& catalog, const nlohmann::json* report,
                                         const std::string& report_source = "report");

/// The rows as text, one block per claim (the claim, then its conditions, claimed, computed,
/// measured and verdict lines, the verdict with its reason), and a count of the verdicts; and
/// as JSON {"kind": "claims", "version": 1, "claims": [...]}.
std::string format_claims_table(const std::vector<ClaimResult>& rows);
nlohmann::json claims_to_json(const std::vector<ClaimResult>& rows);

}  // namespace dtb
