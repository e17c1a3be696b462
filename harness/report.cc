// The JSON report: context (machine, versions, config, dataset), the records and checks of
// every suite, and the atomic write; see report.h.
#include "harness/report.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

namespace dtb {

using nlohmann::json;

namespace {

std::string shell_line(const std::string& cmd) {
  std::array<char, 256> buf{};
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string iso_date() {
  const std::time_t t = std::time(nullptr);
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return b;
}

json check_json(const Check& c, const std::string& suite) {
  json j = {{"name", c.name},           {"suite", suite},   {"value", c.value},
            {"tolerance", c.tolerance}, {"passed", c.passed}, {"detail", c.detail}};
  const double f = c.fraction();
  j["fraction_of_tolerance"] = std::isfinite(f) ? json(f) : json(nullptr);
  return j;
}

}  // namespace

json make_context(const json& config, const Dataset* dataset, const Communicator& world,
                  int ranks_per_node, const std::string& run_id, Backend& backend) {
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  std::string mpi(mpi_version, len);
  if (auto nl = mpi.find_first_of(",\n"); nl != std::string::npos) mpi = mpi.substr(0, nl);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::string src = DTB_SOURCE_DIR;
  // Only rank 0 forks (fork after MPI_Init is unsafe with some interconnects).
  std::string commit =
      world.rank() == 0 ? shell_line("git -C '" + src + "' rev-parse HEAD 2>/dev/null") : "";
  if (world.rank() == 0 && !commit.empty() && !shell_line("git -C '" + src + "' status --porcelain --untracked-files=no 2>/dev/null").empty())
    commit += "-dirty";
#ifdef NDEBUG
  const char* build = "release";
#else
  const char* build = "debug";
#endif
  json ctx = {{"date", iso_date()},
              {"host_name", host},
              {"executable", "dtbench"},
              {"num_cpus", std::thread::hardware_concurrency()},
              {"library_build_type", build},
              {"schema_version", kReportSchemaVersion},
              {"dtbench_version", "0.1.0"},
              {"run_id", run_id},
              {"git_commit", commit.empty() ? "unknown" : commit},
              {"build_type", build},
              {"backend", backend.name()},
              {"devices", {backend.device_name()}},
              {"world_size", world.size()},
              {"ranks_per_node", ranks_per_node},
              {"comm_backend", world.backend()},
              {"mpi_version", mpi},
              {"blas_version", std::string(openblas_get_config())},
              {"cuda_version", nullptr},
              {"nccl_version", nullptr},
              {"config", config}};
  if (dataset)
    ctx["dataset"] = {{"path", dataset->path}, {"bytes", dataset->bytes.size()}, {"sha256", dataset->sha256}};
  return ctx;
}

json make_report(const json& context, const std::vector<SuiteOutcome>& suites) {
  json report = {{"schema_version", kReportSchemaVersion},
                 {"context", context},
                 {"benchmarks", json::array()},
                 {"suites", json::array()},
                 {"checks", json::array()}};
  for (const auto& s : suites) {
    for (const auto& b : s.result.benchmarks) report["benchmarks"].push_back(b);
    int passed = 0;
    for (const auto& c : s.result.checks) {
      report["checks"].push_back(check_json(c, s.name));
      passed += c.passed;
    }
    json entry = {{"name", s.name},
                  {"status", s.status},
                  {"duration_s", s.duration_s},
                  {"checks_passed", passed},
                  {"checks_total", s.result.checks.size()},
                  {"data", s.result.data}};
    entry["error"] = s.error.empty() ? json(nullptr) : json(s.error);
    report["suites"].push_back(entry);
  }
  return report;
}

bool report_passed(const std::vector<SuiteOutcome>& suites) {
  for (const auto& s : suites)
    if (s.status != "passed" && s.status != "skipped") return false;
  return true;
}

void write_json_atomic(const std::string& path, const json& j) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::string tmp_name = ".";
  tmp_name += target.filename().string();
  tmp_name += ".tmp." + std::to_string(getpid());
  const fs::path tmp = target.parent_path() / tmp_name;
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
    out << j.dump(2) << '\n';
    out.flush();
    if (!out) throw std::runtime_error("error writing " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("cannot rename report into " + path);
  }
}

}  // namespace dtb
