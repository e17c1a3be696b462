// Byte-level datasets: read whole, hashed, and sliced into the global batch of a step.
#include "reference/model/data.h"

#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kernels/error.h"
#include "reference/model/rng.h"

namespace dtb {

static std::string sha256_hex(const std::vector<uint8_t>& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  DTB_CHECK(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) == 1,
            "EVP_Digest(sha256) failed");
  std::string hex;
  char buf[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  return hex;
}

Dataset load_dataset(const std::string& path, size_t min_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError("data file not found or unreadable: " + path);
  if (!fs::is_regular_file(st)) throw InputError("data file " + path + " is not a regular file");
  const size_t size = fs::file_size(path, ec);
  if (ec) throw InputError("data file not found or unreadable: " + path);
  if (size > kMaxDatasetBytes)
    throw InputError("data file " + path + " is over 1 GiB (" + std::to_string(size) + " bytes)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("data file not found or unreadable: " + path);
  Dataset d;
  d.path = path;
  d.bytes.resize(size);
  in.read(reinterpret_cast<char*>(d.bytes.data()), std::streamsize(size));
  if (in.gcount() != std::streamsize(size)) throw InputError("error reading data file: " + path);
  if (d.bytes.size() < min_bytes)
    throw InputError("data file " + path + " has " + std::to_string(d.bytes.size()) +
                     " bytes; at least " + std::to_string(min_bytes) + " are needed");
  d.sha256 = sha256_hex(d.bytes);
  return d;
}

void fill_batch(const Dataset& data, uint64_t seed, int64_t step, int global_batch, int first_seq,
                int n_seq, int Tn, int32_t* tokens, int32_t* targets) {
  const size_t N = data.bytes.size();
  DTB_CHECK(N > size_t(Tn), "dataset shorter than one sequence");
  static const uint64_t stream = stream_id("data");
  const size_t span = N - size_t(Tn);  // valid start offsets: [0, span)
  for (int s = 0; s < n_seq; ++s) {
    const uint64_t g = uint64_t(step) * global_batch + uint64_t(first_seq + s);
    size_t start = size_t(random_uniform(seed, stream, g) * double(span));
    if (start >= span) start = span - 1;
    for (int t = 0; t < Tn; ++t) {
      tokens[size_t(s) * Tn + t] = data.bytes[start + t];
      targets[size_t(s) * Tn + t] = data.bytes[start + t + 1];
    }
  }
}

}  // namespace dtb
