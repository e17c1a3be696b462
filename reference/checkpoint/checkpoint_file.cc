// Training checkpoints' files: the rank file format (reference/checkpoint/checkpoint.h's layout),
// durable atomic writes, whole-file reads and SHA-256. Not here: the manifest
// (checkpoint_manifest.cc) and the collective save and load (checkpoint.cc).
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "kernels/error.h"
#include "reference/checkpoint/checkpoint.h"
#include "reference/checkpoint/checkpoint_io.h"

namespace dtb {

namespace fs = std::filesystem;

namespace checkpoint_io {

std::string errno_text() { return std::strerror(errno); }

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += d[p[i] >> 4], s += d[p[i] & 15];
  return s;
}

}  // namespace

std::string sha256_hex(const char* a, size_t na, const char* b, size_t nb) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  DTB_CHECK(ctx != nullptr, "EVP_MD_CTX_new failed");
  const bool ok = EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 && EVP_DigestUpdate(ctx, a, na) == 1 &&
                  EVP_DigestUpdate(ctx, b, nb) == 1 && EVP_DigestFinal_ex(ctx, md, &len) == 1;
  EVP_MD_CTX_free(ctx);
  DTB_CHECK(ok && len == 32, "EVP SHA-256 failed");
  return hex(md, len);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw InputError("checkpoint directory " + dir + ": cannot open to fsync: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw InputError("checkpoint directory " + dir + ": fsync failed: " + why);
}

void write_durably(const std::string& path, const char* data, size_t n) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError("checkpoint file " + path + ": cannot create " + tmp + ": " + errno_text());
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw InputError("checkpoint file " + path + ": write failed: " + why);
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw InputError("checkpoint file " + path + ": fsync failed: " + why);
  }
  if (::close(fd) != 0) throw InputError("checkpoint file " + path + ": close failed: " + errno_text());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw InputError("checkpoint file " + path + ": rename failed: " + why);
  }
  fsync_dir(fs::path(path).parent_path().string());
}

std::vector<char> read_all(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError(what + " " + path + ": missing");
  if (!fs::is_regular_file(st)) throw InputError(what + " " + path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + " " + path + ": unreadable");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(what + " " + path + ": read failed");
  return bytes;
}

}  // namespace checkpoint_io

using namespace checkpoint_io;

namespace {

static_assert(std::endian::native == std::endian::little, "the rank file format is little-endian");

constexpr char kMagic[8] = {'D', 'T', 'B', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kHeaderBytes = 72, kHashedHeaderBytes = 40, kEntryBytes = 48, kMaxSections = 64;
constexpr size_t kNameBytes = 24, kDtypeBytes = 8;

}  // namespace

FileDigest write_rank_file(const std::string& path, const RankFileId& id,
                           const std::vector<CheckpointSection>& sections) {
  DTB_CHECK(sections.size() <= kMaxSections, "write_rank_file: too many sections");
  size_t data_bytes = 0;
  for (const auto& s : sections) {
    DTB_CHECK(s.name.size() < kNameBytes && s.dtype.size() < kDtypeBytes, "write_rank_file: section name too long");
    data_bytes += s.bytes.size();
  }
  const size_t table = sections.size() * kEntryBytes, payload = table + data_bytes;
  std::vector<char> buf(kHeaderBytes + payload, 0);
  std::memcpy(buf.data(), kMagic, 8);
  put<uint32_t>(buf, 8, kCheckpointFormatVersion);
  put<uint32_t>(buf, 12, uint32_t(sections.size()));
  put<int32_t>(buf, 16, id.rank);
  put<int32_t>(buf, 20, id.world_size);
  put<int64_t>(buf, 24, id.step);
  put<uint64_t>(buf, 32, uint64_t(payload));
  size_t off = table;
  for (size_t i = 0; i < sections.size(); ++i) {
    const size_t e = kHeaderBytes + i * kEntryBytes;
    std::memcpy(buf.data() + e, sections[i].name.data(), sections[i].name.size());
    std::memcpy(buf.data() + e + kNameBytes, sections[i].dtype.data(), sections[i].dtype.size());
    put<uint64_t>(buf, e + 32, uint64_t(off));
    put<uint64_t>(buf, e + 40, uint64_t(sections[i].bytes.size()));
    if (!sections[i].bytes.empty())
      std::memcpy(buf.data() + kHeaderBytes + off, sections[i].bytes.data(), sections[i].bytes.size());
    off += sections[i].bytes.size();
  }
  const std::string sha = sha256_hex(buf.data(), kHashedHeaderBytes, buf.data() + kHeaderBytes, payload);
  for (size_t i = 0; i < 32; ++i) buf[40 + i] = char(std::stoi(sha.substr(2 * i, 2), nullptr, 16));
  write_durably(path, buf.data(), buf.size());
  return {uint64_t(buf.size()), sha};
}

std::vector<CheckpointSection> read_rank_file(const std::string& path, const RankFileId& id, const FileDigest* expect) {
  const std::string where = "checkpoint file " + path + ": ";
  const std::vector<char> buf = read_all(path, "checkpoint file");
  const uint64_t size = buf.size();
  if (expect && size < expect->bytes)
    throw InputError(where + "truncated: " + std::to_string(size) + " of " + std::to_string(expect->bytes) + " bytes");
  if (expect && size != expect->bytes)
    throw InputError(where + "wrong size: " + std::to_string(size) + " bytes, the manifest says " +
                     std::to_string(expect->bytes));
  if (size < kHeaderBytes)
    throw InputError(where + "truncated: " + std::to_string(size) + " bytes, shorter than the 72-byte header");
  if (std::memcmp(buf.data(), kMagic, 8) != 0) throw InputError(where + "bad magic (not a dtbench checkpoint file)");
  const uint32_t version = get<uint32_t>(buf, 8), n = get<uint32_t>(buf, 12);
  if (version != kCheckpointFormatVersion)
    throw InputError(where + "format version " + std::to_string(version) + " is not supported (this build reads " +
                     std::to_string(kCheckpointFormatVersion) + ")");
  const uint64_t payload = get<uint64_t>(buf, 32);
  if (payload != size - kHeaderBytes)
    throw InputError(where + (payload > size - kHeaderBytes ? "truncated: " : "wrong size: ") + std::to_string(size) +
                     " bytes, the header says " + std::to_string(kHeaderBytes + payload));
  const std::string sha = sha256_hex(buf.data(), kHashedHeaderBytes, buf.data() + kHeaderBytes, payload);
  const std::string stored = hex(reinterpret_cast<const unsigned char*>(buf.data()) + 40, 32);
  if (sha != stored) throw InputError(where + "checksum mismatch (sha256 " + sha + ", the header says " + stored + ")");
  if (expect && stored != expect->sha256)
    throw InputError(where + "checksum " + stored + " does not match the manifest's " + printable(expect->sha256, 64));
  const int32_t rank = get<int32_t>(buf, 16), world = get<int32_t>(buf, 20);
  const int64_t step = get<int64_t>(buf, 24);
  if (rank != id.rank || world != id.world_size || step != id.step)
    throw InputError(where + "written by rank " + std::to_string(rank) + " of " + std::to_string(world) + " at step " +
                     std::to_string(step) + ", expected rank " + std::to_string(id.rank) + " of " +
                     std::to_string(id.world_size) + " at step " + std::to_string(id.step));
  if (n > kMaxSections || size_t(n) * kEntryBytes > payload)
    throw InputError(where + "a section table of " + std::to_string(n) + " entries does not fit");
  std::vector<CheckpointSection> out;
  for (uint32_t i = 0; i < n; ++i) {
    const size_t e = kHeaderBytes + size_t(i) * kEntryBytes;
    CheckpointSection s;
    s.name.assign(buf.data() + e, strnlen(buf.data() + e, kNameBytes));
    s.dtype.assign(buf.data() + e + kNameBytes, strnlen(buf.data() + e + kNameBytes, kDtypeBytes));
    const uint64_t off = get<uint64_t>(buf, e + 32), bytes = get<uint64_t>(buf, e + 40);
    if (off > payload || bytes > payload - off)
      throw InputError(where + "section '" + printable(s.name, 24) + "' lies outside the payload");
    s.bytes.assign(buf.begin() + long(kHeaderBytes + off), buf.begin() + long(kHeaderBytes + off + bytes));
    out.push_back(std::move(s));
  }
  return out;
}

void write_file_durably(const std::string& path, const std::string& text) {
  write_durably(path, text.data(), text.size());
}


namespace checkpoint_io {

namespace {
constexpr size_t kStateBytes = 6 * 8;  // the "state" section: 6 little-endian 8-byte words
}  // namespace

CheckpointSection state_section(const StateFields& f) {
  CheckpointSection s{"state", "raw", std::vector<char>(kStateBytes)};
  put<int64_t>(s.bytes, 0, f.next);
  put<int64_t>(s.bytes, 8, f.t);
  put<uint64_t>(s.bytes, 16, f.seed);
  put<double>(s.bytes, 24, f.scaler.scale);
  put<int64_t>(s.bytes, 32, f.scaler.growth_tracker);
  put<int64_t>(s.bytes, 40, f.scaler.skipped);
  return s;
}

const CheckpointSection* find_section(const std::vector<CheckpointSection>& sections, const std::string& name) {
  for (const auto& x : sections)
    if (x.name == name) return &x;
  return nullptr;
}

StateFields read_state(const std::vector<CheckpointSection>& sections, const std::string& path, int64_t step,
                       uint64_t seed) {
  const CheckpointSection* s = find_section(sections, "state");
  if (!s || s->dtype != "raw" || s->bytes.size() != kStateBytes)
    throw InputError("checkpoint file " + path + ": no valid 'state' section");
  StateFields f;
  f.next = get<int64_t>(s->bytes, 0);
  f.t = get<int64_t>(s->bytes, 8);
  f.seed = get<uint64_t>(s->bytes, 16);
  f.scaler = {get<double>(s->bytes, 24), get<int64_t>(s->bytes, 32), get<int64_t>(s->bytes, 40)};
  if (f.next != step)
    throw InputError("checkpoint file " + path + ": next step " + std::to_string(f.next) + ", the manifest says " +
                     std::to_string(step));
  if (f.seed != seed)
    throw InputError("checkpoint file " + path + ": seed " + std::to_string(f.seed) + " does not match this run's " +
                     std::to_string(seed));
  if (f.t < 0 || f.t > f.next || f.t > std::numeric_limits<int>::max())
    throw InputError("checkpoint file " + path + ": AdamW step count " + std::to_string(f.t) + " is outside [0, " +
                     std::to_string(f.next) + "]");
  return f;
}

CheckpointSection index_section(const std::string& name, const std::vector<int64_t>& index) {
  CheckpointSection s{name, "raw", {}};
  for (size_t i = 0; i < index.size();) {
    if (index[i] < 0) {
      ++i;
      continue;
    }
    size_t n = 1;
    while (i + n < index.size() && index[i + n] == index[i] + int64_t(n)) ++n;
    const size_t at = s.bytes.size();
    s.bytes.resize(at + 24);
    put<int64_t>(s.bytes, at, index[i]);
    put<int64_t>(s.bytes, at + 8, int64_t(i));
    put<int64_t>(s.bytes, at + 16, int64_t(n));
    i += n;
  }
  return s;
}

std::vector<CheckpointSection> fp8_sections(const Fp8Checkpoint& c) {
  if (c.history_len == 0) return {};
  DTB_CHECK(c.values.size() == c.layers.size() * Fp8Checkpoint::floats_per_layer(c.history_len),
            "fp8_sections: values are not floats_per_layer for each layer");
  CheckpointSection v{"fp8", "f32", std::vector<char>(c.values.size() * sizeof(float))};
  if (!c.values.empty()) std::memcpy(v.bytes.data(), c.values.data(), v.bytes.size());
  CheckpointSection index{"index.fp8", "raw", std::vector<char>(8 * (1 + c.layers.size()))};
  put<int64_t>(index.bytes, 0, c.history_len);
  for (size_t i = 0; i < c.layers.size(); ++i) put<int64_t>(index.bytes, 8 * (1 + i), c.layers[i]);
  return {std::move(v), std::move(index)};
}

Fp8Take::Fp8Take(const Fp8Checkpoint& w) : want(w), found(w.layers.size(), 0) {
  want.values.assign(want.layers.size() * Fp8Checkpoint::floats_per_layer(want.history_len), 0.0f);
}

void Fp8Take::offer(const std::vector<CheckpointSection>& sections, const std::string& path) {
  if (want.history_len == 0) return;
  const CheckpointSection* v = find_section(sections, "fp8");
  const CheckpointSection* index = find_section(sections, "index.fp8");
  if (!v && !index) return;  // a rank that held no FP8 layer (none today: every stage holds one)
  const std::string me = "checkpoint file " + path + ": ";
  if (!v || !index) throw InputError(me + "section '" + (v ? "index.fp8" : "fp8") + "' is missing beside the other");
  if (v->dtype != "f32") throw InputError(me + "section 'fp8' is not f32 values");
  if (index->dtype != "raw" || index->bytes.size() < 8 || index->bytes.size() % 8 != 0)
    throw InputError(me + "section 'index.fp8' is not a history length and layer indices (i64)");
  const int64_t len = get<int64_t>(index->bytes, 0);
  if (len != want.history_len)
    throw InputError(me + "FP8 amax histories of " + std::to_string(len) +
                     " steps, this run keeps " + std::to_string(want.history_len));
  const size_t n = index->bytes.size() / 8 - 1, per = Fp8Checkpoint::floats_per_layer(want.history_len);
  if (v->bytes.size() != n * per * sizeof(float))
    throw InputError(me + "section 'fp8' holds " + std::to_string(v->bytes.size()) +
                     " bytes, not the FP8 state of its " + std::to_string(n) + " layers");
  for (size_t i = 0; i < n; ++i) {
    const int64_t layer = get<int64_t>(index->bytes, 8 * (1 + i));
    const auto it = std::find(want.layers.begin(), want.layers.end(), layer);
    if (it == want.layers.end()) continue;
    const size_t k = size_t(it - want.layers.begin());
    const char* src = v->bytes.data() + i * per * sizeof(float);
    float* dst = want.values.data() + k * per;
    if (found[k] && std::memcmp(dst, src, per * sizeof(float)) != 0)
      throw InputError(me + "the FP8 scaling state of transformer layer " +
                       std::to_string(layer) + " differs from another rank file's (it is the same on every rank "
                       "that holds the layer)");
    std::memcpy(dst, src, per * sizeof(float));
    found[k] = 1;
  }
}

void Fp8Take::check_complete(const std::string& read) const {
  for (size_t k = 0; k < found.size(); ++k)
    if (!found[k])
      throw InputError(read + " holds no FP8 scaling state of transformer layer " + std::to_string(want.layers[k]) +
                       " (saved without FP8's delayed recipe, or damaged)");
}

std::pair<std::string, FileDigest> rank_file_of(const nlohmann::json& m, int r, const std::string& step_dir) {
  const nlohmann::json& e = m["ranks"][size_t(r)];
  const std::string name = "rank-" + std::to_string(r) + ".bin";
  if (!e.is_object() || e.value("rank", -1) != r || e.value("file", "") != name || !e.contains("bytes") ||
      !e["bytes"].is_number_unsigned() || !e.contains("sha256") || !e["sha256"].is_string())
    throw InputError("checkpoint " + printable(step_dir) + ": manifest.json's entry for rank " + std::to_string(r) +
                     " is malformed");
  return {(fs::path(step_dir) / name).string(), FileDigest{e["bytes"].get<uint64_t>(), e["sha256"].get<std::string>()}};
}

}  // namespace checkpoint_io

}  // namespace dtb
