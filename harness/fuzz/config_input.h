// The config path `dtbench run` takes on rank 0 (harness/main.cc cmd_run), without MPI, on
// one input of the config fuzzer (config_fuzz.cc); config_test.cc replays the regressions
// through it. The run id checked, --sweep applied, parse_config with the command-line
// overrides on a world of N ranks, the validated config dumped and parsed back (what
// on_root sends the ranks) and the values cmd_run reads from it next.
// Input: the config text, then optional NUL-separated fields: --suites, --data, --backend,
// --sweep's layouts ("*": --sweep alone; empty: no --sweep), the world "N" or "N/M" (M ranks
// per node), --run-id. Plain JSON (the seed corpus) is a config alone on 4 ranks, 4 per node.
// (--output-dir is left out: cmd_run sets it after parse_config, unchecked.)
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "harness/config.h"
#include "kernels/error.h"

namespace dtb::fuzz {

// "N" or "N/M", each clamped to [1, 65536] (a world this size is plausible; sizes beyond it
// only make the suites' layout searches slow).
inline WorldInfo parse_world(const std::string& s) {
  if (s.empty()) return WorldInfo(4, 4);
  auto number = [](const std::string& t) {
    long v = 0;
    for (char c : t.substr(0, 6))
      if (c >= '0' && c <= '9') v = v * 10 + (c - '0');
    return int(std::clamp(v, 1L, 65536L));
  };
  const size_t slash = s.find('/');
  const int n = number(s.substr(0, slash));
  return WorldInfo(n, slash == std::string::npos ? n : std::min(n, number(s.substr(slash + 1))));
}

/// Runs the path on one input. Errors: InputError for bad input, as dtbench would print it;
/// anything else escaping is a bug.
inline void run_config_input(const std::string& input) {
  using nlohmann::json;
  std::vector<std::string> f;
  size_t start = 0;
  while (f.size() < 6) {
    const size_t nul = input.find('\0', start);
    if (nul == std::string::npos) break;
    f.push_back(input.substr(start, nul - start));
    start = nul + 1;
  }
  f.push_back(input.substr(start));
  f.resize(7);  // f[0] the text, then the options; absent ones are empty
  const std::string &suites = f[1], &data = f[2], &backend = f[3], &sweep = f[4], &run_id = f[6];
  if (!run_id.empty()) check_file_stem(run_id, "--run-id");
  if (!sweep.empty() && !suites.empty()) throw InputError("--sweep and --suites do not go together");
  std::string text = f[0];
  if (!sweep.empty()) text = apply_sweep(text, sweep == "*" ? "" : sweep);
  const json c = parse_config(text, "fuzz", suites, data, parse_world(f[5]), backend);
  // What cmd_run does with the verdict: sent as text, parsed back, then read.
  const json cfg = json::parse(c.dump());
  (void)cfg.dump(2);  // --print-config
  (void)cfg["suites"].dump();
  (void)cfg["output_dir"].get<std::string>();
  (void)cfg["name"].get<std::string>();
  (void)(cfg["model"]["T"].get<size_t>() + 2);
  (void)cfg["data"].get<std::string>();
  (void)(cfg["backend"] == "cuda");
  (void)cfg["comm_timeout_s"].get<double>();
}

}  // namespace dtb::fuzz
