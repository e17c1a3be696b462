// See json_keys.h.
#include "reference/json_keys.h"

#include <cstdint>

#include "kernels/error.h"

namespace dtb {

int64_t int_in_range(const nlohmann::json& s, const std::string& key, const std::string& path,
                     int64_t lo, int64_t hi) {
  const nlohmann::json& v = s.at(key);
  const bool in = v.is_number_integer() &&
                  !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) &&
                  v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in)
    throw InputError(path + " = " + v.dump() + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v.get<int64_t>();
}

double number_in_range(const nlohmann::json& s, const std::string& key, const std::string& path,
                       double lo, double hi) {
  const double x = s.at(key).get<double>();
  if (!(x >= lo && x <= hi))
    throw InputError(path + " = " + s.at(key).dump() + " is out of range [" + nlohmann::json(lo).dump() +
                     ", " + nlohmann::json(hi).dump() + "]");
  return x;
}

}  // namespace dtb
