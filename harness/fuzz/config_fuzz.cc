// libFuzzer target: bytes -> the config path `dtbench run` takes on rank 0 (config_input.h
// says what runs and how an input spells the command-line options). InputError is the
// answer to bad input; any other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/fuzz/config_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    dtb::fuzz::run_config_input(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const dtb::InputError&) {
    // The expected answer to bad input; anything else propagates and aborts (a finding).
  }
  return 0;
}
