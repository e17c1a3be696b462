// Counter-based random numbers: every value is a pure function of (seed, stream, counter),
// with no state, so a shard of a tensor or of a batch draws exactly the values the
// single-rank run draws at the same global index (docs/numerics.md).
// The mixer is SplitMix64 (Steele, Lea & Flood 2014), which passes BigCrush as a hash
// of a counter.
#pragma once
#include <cstdint>
#include <string_view>

namespace dtb {

/// SplitMix64 finaliser: a bijective 64-bit mix.
uint64_t splitmix64(uint64_t x);
/// FNV-1a 64-bit hash of a name, used as the stream id (e.g. the parameter name).
uint64_t stream_id(std::string_view name);
/// 64 random bits for (seed, stream, counter).
uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter);
/// Uniform double in (0, 1) (never 0, so log() is safe) for (seed, stream, counter).
double random_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
/// Standard normal for (seed, stream, index): Box-Muller on counters 2*index and 2*index+1.
double random_normal(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace dtb
