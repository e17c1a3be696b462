// dtbench: the command line. Each subcommand is a file pair of its own: `dtbench run`
// (harness/run_cli.h, its run loop harness/run_suites.h), list (harness/list_cli.h), memory,
// plan, validate, count, claims (harness/claims/claims_cli.h); `dtbench summary` is here. Bad
// input ends with one line on stderr and exit status 2; a failed check with exit status 1.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "harness/claims/claims_cli.h"
#include "harness/count.h"
#include "harness/list_cli.h"
#include "harness/memory_cli.h"
#include "harness/plan_cli.h"
#include "harness/report.h"
#include "harness/run_cli.h"
#include "harness/validate.h"
#include "kernels/comm/communicator.h"
#include "kernels/comm/watchdog.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/error.h"

namespace dtb {
namespace {

// `dtbench summary REPORT`: the summary `dtbench run` prints at its end, for a report on
// disk (the one a killed run left, say). Reads no collective: each rank reads the file.
int cmd_summary(const std::string& path, bool root) {
  const ReportSummary s = read_report_file(path);
  if (root) dtb::print_summary(s, path);
  return s.passed() ? 0 : 1;
}

}  // namespace
}  // namespace dtb

int main(int argc, char** argv) {
  // OpenBLAS's idle threads spin briefly (may re-execute this program, so first of all).
  dtb::set_blas_thread_timeout(argv);
  // SIGINT and SIGTERM go to the communication watchdog's thread only (it writes what
  // finished, then exits); blocked here, before MPI starts threads that would inherit them.
  dtb::block_termination_signals();
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS ||
      provided < MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "dtbench: error: MPI_Init_thread failed (thread level %d)\n", provided);
    return 1;
  }
  int code = 0;
  {
    auto world = dtb::make_mpi_world();
    dtb::start_comm_watchdog(MPI_COMM_WORLD, dtb::kDefaultCommTimeout);
    const bool root = world->rank() == 0;
    CLI::App app{"dtbench: benchmark and conformance suite for distributed LLM training", "dtbench"};
    app.require_subcommand(1);
    dtb::RunArgs args;
    auto* run = dtb::add_run_subcommand(app, args);
    auto* list = app.add_subcommand("list", "list suites and named configs");
    bool list_layout_keys = false, list_json = false;
    list->add_flag("--layout-keys", list_layout_keys,
                   "list the layout keys' spellings instead: config key, layout spec token, record name key, record "
                   "field, `dtbench memory` flag");
    list->add_flag("--json", list_json, "with --layout-keys: print them as JSON, one object per key");
    std::string summary_path;
    auto* summary = app.add_subcommand(
        "summary", "print the end-of-run summary of a report (e.g. results/latest.json); exit 1 if a suite failed");
    summary->add_option("REPORT", summary_path, "report JSON file")->required();
    dtb::MemoryArgs memory_args;
    auto* memory = dtb::add_memory_subcommand(app, memory_args);
    dtb::PlanArgs plan_args;
    auto* plan = dtb::add_plan_subcommand(app, plan_args);
    dtb::ValidateArgs validate_args;
    auto* validate = dtb::add_validate_subcommand(app, validate_args);
    dtb::CountArgs count_args;
    auto* count = dtb::add_count_subcommand(app, count_args);
    dtb::ClaimsArgs claims_args;
    auto* claims = dtb::add_claims_subcommand(app, claims_args);
    try {
      app.parse(argc, argv);
      if (*run) code = dtb::cmd_run(*world, *run, args);
      else if (*list) code = dtb::cmd_list(*world, list_layout_keys, list_json);
      else if (*summary) code = dtb::cmd_summary(summary_path, root);
      else if (*memory) code = dtb::cmd_memory(*memory, memory_args, root);
      else if (*plan) code = dtb::cmd_plan(*world, *plan, plan_args, root);
      else if (*claims) code = dtb::cmd_claims(*claims, claims_args, root);
      else if (*count) code = dtb::cmd_count(*world, count_args);
      else if (*validate) code = dtb::cmd_validate(*world, validate_args);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {
        if (root) app.exit(e);
      } else if (root) {
        std::string what = e.what();
        std::fprintf(stderr, "dtbench: error: %s (see dtbench --help)\n", what.c_str());
      }
      code = e.get_exit_code() == 0 ? 0 : dtb::kExitInput;
    } catch (const dtb::InputError& e) {
      if (root) std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = dtb::kExitInput;
    } catch (const std::exception& e) {  // not bad input: a failure of this machine or a bug
      // Other ranks may be waiting in a collective for this one: end the whole job.
      if (world->size() > 1) dtb::fatal(__FILE__, __LINE__, std::string("error: ") + e.what());
      std::fprintf(stderr, "dtbench: error: %s\n", e.what());
      code = 1;
    }
  }
  dtb::stop_comm_watchdog();
  MPI_Finalize();
  return code;
}

