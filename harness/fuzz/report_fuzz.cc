// libFuzzer target: bytes -> `dtbench summary`'s path (harness/report.h): read_report, then
// the summary formatted and the exit status decided. InputError is the answer to bad input;
// any other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/report.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const dtb::ReportSummary s = dtb::read_report(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)dtb::format_summary(s, "fuzz.json");
    (void)s.passed();
  } catch (const dtb::InputError&) {
    // The expected answer to bad input; anything else propagates and aborts (a finding).
  }
  return 0;
}
