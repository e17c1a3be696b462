// `dtbench claims` (harness/claims/claims_cli.h): its options, and the catalog evaluated against
// an optional report, printed on rank 0.
#include "harness/claims/claims_cli.h"

#include <cstdio>
#include <fstream>

#include "harness/claims/claims.h"
#include "harness/config.h"
#include "harness/report.h"
#include "kernels/error.h"

namespace dtb {

CLI::App* add_claims_subcommand(CLI::App& app, ClaimsArgs& a) {
  CLI::App* sub = app.add_subcommand(
      "claims", "check the field's rules of thumb (harness/claims/claims.json) against dtbench's models and a report");
  sub->add_option("--report", a.report, "a dtbench report whose suites give the measured column");
  sub->add_option("--catalog", a.catalog, "claims catalog JSON (default: harness/claims/claims.json)");
  sub->add_option("--output", a.output, "also write the evaluated claims as JSON to FILE")->type_name("FILE");
  sub->add_flag("--json", a.json, "print JSON instead of the table");
  return sub;
}

int cmd_claims(const CLI::App& sub, const ClaimsArgs& a, bool root) {
  for (const char* opt : {"--report", "--catalog", "--output"})
    if (sub.count(opt) > 0 && sub.get_option(opt)->as<std::string>().empty())
      throw InputError(std::string("claims ") + opt + " is empty");
  const nlohmann::json catalog = load_claims_catalog(a.catalog.empty() ? default_claims_catalog() : a.catalog);
  nlohmann::json report;
  if (!a.report.empty()) {  // read and checked as `dtbench summary` reads it (schema version, structure)
    report = parse_json_input(read_input_file(a.report, "report", size_t(1) << 30), "report " + a.report);
    summarize_report(report, a.report);
  }
  const std::vector<ClaimResult> rows = evaluate_claims(catalog, a.report.empty() ? nullptr : &report, a.report);
  nlohmann::json out = claims_to_json(rows);
  out["catalog"] = a.catalog.empty() ? std::string("harness/claims/claims.json") : a.catalog;  // the default, as the repository names it
  out["report"] = a.report.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.report);
  if (!root) return 0;
  if (!a.output.empty()) {
    std::ofstream f(a.output);
    if (!(f << out.dump(1) << "\n")) throw InputError("--output " + a.output + ": cannot write");
  }
  if (a.json) std::printf("%s\n", out.dump(1).c_str());
  else std::printf("%s", format_claims_table(rows).c_str());
  return 0;
}

}  // namespace dtb
