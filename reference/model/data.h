// Training data: a text file tokenised byte-level (vocabulary 256), and the
// sharding-invariant global batch of each step (docs/numerics.md): the batch
// at step s is a pure function of (dataset, seed, s), and a DP rank or a micro-batch takes
// a contiguous slice of its sequences.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dtb {

/// A training text as byte tokens (vocabulary 256), with where it came from.
struct Dataset {
  std::string path;
  std::vector<uint8_t> bytes;  // the file's bytes = its tokens
  std::string sha256;          // hex digest of the file
};

/// Largest dataset read whole into memory.
inline constexpr size_t kMaxDatasetBytes = size_t(1) << 30;

/// Reads a whole file as byte tokens and hashes it (SHA-256 via OpenSSL).
/// Errors: throws InputError if the file is missing, unreadable, not a regular file (a
/// directory, device or FIFO), over kMaxDatasetBytes, or shorter than `min_bytes` (a
/// dataset must hold at least one sequence of T+1 tokens).
Dataset load_dataset(const std::string& path, size_t min_bytes);

/// Fills tokens and targets (n_seq, Tn) with sequences [first_seq, first_seq + n_seq) of
/// the global batch of step `step`: global sequence g starts at byte offset
/// floor(U(seed, "data", step * global_batch + g) * (N - Tn)), U uniform in (0,1), N the
/// dataset size; targets are tokens shifted by one byte. Requires N > Tn.
void fill_batch(const Dataset& data, uint64_t seed, int64_t step, int global_batch, int first_seq,
                int n_seq, int Tn, int32_t* tokens, int32_t* targets);

}  // namespace dtb
