// SplitMix64 as a counter-based generator: uniform and normal draws by index.
#include "reference/model/rng.h"

#include <cmath>
#include <numbers>

namespace dtb {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter) {
  // Nesting the mixer keeps (seed, stream, counter) triples apart: no two triples that
  // differ only by swapping fields collide the way a plain XOR would.
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ counter);
}

double random_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  // 53 random bits, offset by half an ulp: values in (0, 1).
  return (double(random_bits(seed, stream, counter) >> 11) + 0.5) * 0x1.0p-53;
}

double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = random_uniform(seed, stream, 2 * index);
  const double u2 = random_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace dtb
