#include "kernels/slowdown.h"

#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "kernels/error.h"

namespace dtb {
namespace {

// A decimal number, digits with an optional fraction ("1.1", "2"): no sign, exponent, hex or blanks.
double parse_factor(const std::string& text, const std::string& target) {
  const size_t dot = text.find('.');
  const std::string whole = text.substr(0, dot), frac = dot == std::string::npos ? "0" : text.substr(dot + 1);
  const bool decimal = !whole.empty() && !frac.empty() && whole.size() <= 3 && frac.size() <= 15 &&
                       whole.find_first_not_of("0123456789") == std::string::npos &&
                       frac.find_first_not_of("0123456789") == std::string::npos;
  const double f = decimal ? std::stod(text) : NAN;
  if (!(f >= 1.0 && f <= 100.0))
    throw InputError("DTB_INJECT_SLOWDOWN: " + target + "'s factor '" + text + "' is not a number in [1, 100]");
  return f;
}

size_t parse_bytes(const std::string& text, const std::string& band) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 18)
    throw InputError("DTB_INJECT_SLOWDOWN: all_reduce band '" + band + "' is not LO-HI in bytes");
  return size_t(std::stoull(text));
}

}  // namespace

std::string InjectedSlowdown::to_string() const {
  std::ostringstream s;
  s.precision(15);  // what a decimal spec of up to 15 digits reads back as
  const char* sep = "";
  if (train_step != 1.0) s << sep << "train_step=" << train_step, sep = ",";
  if (gemm != 1.0) s << sep << "gemm=" << gemm, sep = ",";
  if (all_reduce != 1.0) {
    s << sep << "all_reduce=" << all_reduce;
    if (all_reduce_lo != 0 || all_reduce_hi != SIZE_MAX) s << "@" << all_reduce_lo << "-" << all_reduce_hi;
  }
  return s.str();
}

InjectedSlowdown parse_injected_slowdown(const std::string& spec) {
  InjectedSlowdown out;
  if (!spec.empty() && spec.back() == ',')
    throw InputError("DTB_INJECT_SLOWDOWN: '" + spec + "' ends with a comma");
  bool seen_step = false, seen_gemm = false, seen_ar = false;
  std::stringstream parts(spec);
  std::string part;
  while (std::getline(parts, part, ',')) {
    const size_t eq = part.find('=');
    if (eq == std::string::npos)
      throw InputError("DTB_INJECT_SLOWDOWN: '" + part + "' is not TARGET=FACTOR (train_step, gemm, all_reduce)");
    const std::string target = part.substr(0, eq);
    std::string value = part.substr(eq + 1);
    bool* seen = target == "train_step" ? &seen_step : target == "gemm" ? &seen_gemm : target == "all_reduce" ? &seen_ar
                                                                                                           : nullptr;
    if (!seen)
      throw InputError("DTB_INJECT_SLOWDOWN: unknown target '" + target + "' (train_step, gemm, all_reduce)");
    if (*seen) throw InputError("DTB_INJECT_SLOWDOWN: target '" + target + "' given twice");
    *seen = true;
    if (target == "all_reduce") {
      const size_t at = value.find('@');
      if (at != std::string::npos) {
        const std::string band = value.substr(at + 1);
        const size_t dash = band.find('-');
        if (dash == std::string::npos)
          throw InputError("DTB_INJECT_SLOWDOWN: all_reduce band '" + band + "' is not LO-HI in bytes");
        out.all_reduce_lo = parse_bytes(band.substr(0, dash), band);
        out.all_reduce_hi = parse_bytes(band.substr(dash + 1), band);
        if (out.all_reduce_lo > out.all_reduce_hi)
          throw InputError("DTB_INJECT_SLOWDOWN: all_reduce band '" + band + "' has LO > HI");
        value = value.substr(0, at);
      }
      out.all_reduce = parse_factor(value, target);
    } else {
      (target == "gemm" ? out.gemm : out.train_step) = parse_factor(value, target);
    }
  }
  return out;
}

InjectedSlowdown injected_slowdown_from_env() {
  const char* v = std::getenv("DTB_INJECT_SLOWDOWN");
  return parse_injected_slowdown(v ? v : "");
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double wall_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double extra_cpu_seconds(double factor, double cpu, double elapsed, double& fastest) {
  fastest = std::min(fastest, elapsed);
  return (factor - 1.0) * std::min(cpu, fastest);
}

void spin_cpu(double seconds) {
  if (!(seconds > 0)) return;
  const double end = thread_cpu_seconds() + seconds;
  while (thread_cpu_seconds() < end) {
  }
}

}  // namespace dtb
