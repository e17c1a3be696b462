// Training checkpoints: the rank file format, durable writes, the manifest and its checks,
// and the collective save and load (reference/checkpoint.h).
#include "reference/checkpoint.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "kernels/error.h"
#include "kernels/half.h"

namespace dtb {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little, "the rank file format is little-endian");

constexpr char kMagic[8] = {'D', 'T', 'B', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kHeaderBytes = 72, kHashedHeaderBytes = 40, kEntryBytes = 48, kMaxSections = 64;
constexpr size_t kNameBytes = 24, kDtypeBytes = 8;

std::string errno_text() { return std::strerror(errno); }

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += d[p[i] >> 4], s += d[p[i] & 15];
  return s;
}

// SHA-256 of a then b, as 64 hex digits.
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

template <typename V>
void put(std::vector<char>& buf, size_t at, V v) {
  std::memcpy(buf.data() + at, &v, sizeof v);
}
template <typename V>
V get(const std::vector<char>& buf, size_t at) {
  V v;
  std::memcpy(&v, buf.data() + at, sizeof v);
  return v;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw InputError("checkpoint directory " + dir + ": cannot open to fsync: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw InputError("checkpoint directory " + dir + ": fsync failed: " + why);
}

// Writes `n` bytes to `path`'s temporary, fsyncs, renames over `path`, fsyncs the directory.
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

// The whole file, or InputError "checkpoint file <path>: missing / unreadable".
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

// Agreement: every rank passes its error ("" when fine); if any rank failed, every rank
// throws the lowest failing rank's message, so none waits in a collective the others left.
void agree(Communicator& world, const std::string& why) {
  int failed = why.empty() ? 0 : 1, any = failed;
  world.all_reduce(&any, &any, 1, DType::i32, ReduceOp::max);
  if (!any) return;
  int who = failed ? world.rank() : world.size();
  world.all_reduce(&who, &who, 1, DType::i32, ReduceOp::min);
  std::string msg = world.rank() == who ? why : std::string();
  int len = int(std::min<size_t>(msg.size(), 4096));
  world.broadcast(&len, 1, DType::i32, who);
  msg.resize((size_t(len) + 3) / 4 * 4);  // moved as 4-byte words
  if (len) world.broadcast(msg.data(), msg.size() / 4, DType::i32, who);
  msg.resize(size_t(len));
  throw InputError(msg);
}

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}

// manifest[a][b] (b may be empty) as V, or InputError naming the key.
template <typename V>
V field(const json& m, const std::string& where, const char* a, const char* b = nullptr) {
  const std::string key = b ? std::string(a) + "." + b : a;
  try {
    const json& j = b ? m.at(a).at(b) : m.at(a);
    if constexpr (std::is_same_v<V, std::string>) {
      if (!j.is_string()) throw InputError("");
    } else if constexpr (std::is_same_v<V, bool>) {
      if (!j.is_boolean()) throw InputError("");
    } else {
      if (!j.is_number_integer()) throw InputError("");
    }
    return j.get<V>();
  } catch (const std::exception&) {
    throw InputError("checkpoint " + where + ": manifest.json lacks '" + key + "' or it has the wrong type");
  }
}

// An int field of the manifest (a layout or model size), in [0, 2^30]: a larger value must
// not wrap to a small one that matches the run.
int int_field(const json& m, const std::string& where, const char* a, const char* b = nullptr) {
  (void)field<int64_t>(m, where, a, b);  // present and an integer
  const json& j = b ? m.at(a).at(b) : m.at(a);
  const bool in = !(j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(1) << 30) && j.get<int64_t>() >= 0 &&
                  j.get<int64_t>() <= int64_t(1) << 30;
  if (!in)
    throw InputError("checkpoint " + where + ": manifest.json's '" + (b ? std::string(a) + "." + b : std::string(a)) +
                     "' = " + j.dump() + " is out of range [0, 1073741824]");
  return int(j.get<int64_t>());
}

std::string describe_model(const GptConfig& c) {
  return "L=" + std::to_string(c.L) + " C=" + std::to_string(c.C) + " NH=" + std::to_string(c.NH) +
         " T=" + std::to_string(c.T) + " V=" + std::to_string(c.V);
}

// The "state" section: next step, AdamW t, seed, loss scale (bits of a double), growth
// tracker, skipped steps; 8 bytes each.
constexpr size_t kStateBytes = 6 * 8;

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

CheckpointRunInfo checkpoint_run_info(const GptConfig& model, const ParallelLayout& layout, const ZeroConfig& zero,
                                      const TrainConfig& cfg, const std::string& dataset_sha256) {
  CheckpointRunInfo r;
  r.layout = layout;
  r.zero_stage = zero.stage;
  r.offload_optimizer = zero.offload_optimizer;
  r.precision = cfg.precision;
  r.model = model;
  r.seed = cfg.seed;
  r.dataset_sha256 = dataset_sha256;
  r.global_batch = cfg.global_batch;
  r.seq_len = cfg.seq_len;
  r.loss_scaling = cfg.loss_scaler.enabled;
  return r;
}

std::string describe_layout(const CheckpointRunInfo& r) {
  const ParallelLayout& l = r.layout;
  std::string s;
  if (l.tp > 1) s += "TP" + std::to_string(l.tp) + "x";
  if (l.pp > 1) s += "PP" + std::to_string(l.pp) + "x";
  s += "DP" + std::to_string(l.dp) + " zero" + std::to_string(r.zero_stage);
  if (r.offload_optimizer) s += " offload";
  if (l.pp > 1) s += " " + l.schedule;
  if (l.virtual_stages > 1) s += " v" + std::to_string(l.virtual_stages);
  return s;
}

void TrainHistory::append(const TrainRun& run) {
  losses.insert(losses.end(), run.losses.begin(), run.losses.end());
  loss_scales.insert(loss_scales.end(), run.loss_scales.begin(), run.loss_scales.end());
  grad_norms.insert(grad_norms.end(), run.grad_norms.begin(), run.grad_norms.end());
  skipped.insert(skipped.end(), run.skipped.begin(), run.skipped.end());
}

namespace {
json numbers_to_json(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(std::isfinite(x) ? json(x) : json(nullptr));
  return a;
}
}  // namespace

json history_to_json(const TrainHistory& h) {
  return {{"losses", numbers_to_json(h.losses)},
          {"loss_scales", numbers_to_json(h.loss_scales)},
          {"grad_norms", numbers_to_json(h.grad_norms)},
          {"skipped", h.skipped}};
}

TrainHistory history_from_json(const json& m, int64_t steps, const TrainConfig& cfg, const std::string& step_dir) {
  const std::string bad = "checkpoint " + printable(step_dir) + ": manifest.json's history does not hold the " +
                          std::to_string(steps) + " steps the train suite records";
  TrainHistory h;
  auto numbers = [&](const char* key, size_t n, std::vector<double>& out) {
    const json& a = m.contains("history") && m["history"].is_object() ? m["history"].value(key, json()) : json();
    if (!a.is_array() || a.size() != n) throw InputError(bad);
    for (const json& x : a) {
      if (!x.is_null() && !x.is_number()) throw InputError(bad);
      out.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
    }
  };
  numbers("losses", size_t(steps), h.losses);
  numbers("loss_scales", cfg.loss_scaler.enabled ? size_t(steps) : 0, h.loss_scales);
  numbers("grad_norms", cfg.grad_clip > 0 ? size_t(steps) : 0, h.grad_norms);
  std::vector<double> skipped;
  numbers("skipped", cfg.loss_scaler.enabled ? size_t(steps) : 0, skipped);
  for (double x : skipped) h.skipped.push_back(x != 0 ? 1 : 0);
  return h;
}

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step-" + std::to_string(step))).string();
}

std::string resolve_resume(const std::string& dir, const std::string& resume_from) {
  if (resume_from.empty()) return "";
  if (resume_from == "latest") {
    if (dir.empty()) throw InputError("\"latest\" needs a checkpoint directory");
    const std::string latest = (fs::path(dir) / "latest").string();
    std::error_code ec;
    if (!fs::exists(latest, ec)) return "";
    const std::vector<char> b = read_all(latest, "checkpoint");
    std::string text(b.begin(), b.end());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
      throw InputError("checkpoint " + latest + ": '" + printable(text, 40) + "' is not a step number");
    return checkpoint_step_dir(dir, std::stoll(text));
  }
  std::error_code ec;
  if (!fs::is_directory(resume_from, ec))
    throw InputError("'" + printable(resume_from) + "' is not a checkpoint step directory (no such directory)");
  return resume_from;
}

json check_checkpoint_manifest(const std::string& step_dir, const CheckpointRunInfo& run) {
  const std::string path = (fs::path(step_dir) / "manifest.json").string();
  const std::string where = printable(step_dir);
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) throw InputError("checkpoint " + where + ": no such directory");
  if (!fs::exists(path, ec))
    throw InputError("checkpoint " + where + ": no manifest.json (an incomplete checkpoint is never loaded)");
  json m;
  try {
    const std::vector<char> b = read_all(path, "checkpoint manifest");
    m = json::parse(b.begin(), b.end());
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw InputError("checkpoint " + where + ": manifest.json is unreadable: " + printable(what, 120));
  }
  if (!m.is_object()) throw InputError("checkpoint " + where + ": manifest.json is not a JSON object");
  const auto version = field<int64_t>(m, where, "format_version");
  if (version != kCheckpointFormatVersion)
    throw InputError("checkpoint " + where + ": format version " + std::to_string(version) +
                     " is not supported (this build reads " + std::to_string(kCheckpointFormatVersion) + ")");
  CheckpointRunInfo saved;
  saved.layout.tp = int_field(m, where, "layout", "tp");
  saved.layout.dp = int_field(m, where, "layout", "dp");
  saved.layout.pp = int_field(m, where, "layout", "pp");
  saved.layout.virtual_stages = int_field(m, where, "layout", "virtual_stages");
  saved.layout.schedule = field<std::string>(m, where, "layout", "schedule");
  saved.zero_stage = int_field(m, where, "layout", "zero_stage");
  saved.offload_optimizer = field<bool>(m, where, "layout", "offload_optimizer");
  const std::string prec = field<std::string>(m, where, "layout", "precision");
  const auto world = field<int64_t>(m, where, "world_size");
  const std::string me = "checkpoint " + where + ": ";
  // The layout: another DP size alone is resharding (refused); anything else, the layouts.
  const ParallelLayout& a = saved.layout;
  const ParallelLayout& b = run.layout;
  const bool same_rest = a.tp == b.tp && a.pp == b.pp && a.virtual_stages == b.virtual_stages &&
                         (a.pp == 1 || a.schedule == b.schedule) && saved.zero_stage == run.zero_stage &&
                         saved.offload_optimizer == run.offload_optimizer;
  if (same_rest && a.dp != b.dp)
    throw InputError(me + "saved with DP" + std::to_string(a.dp) + ", this run has DP" + std::to_string(b.dp) +
                     ": resharding a checkpoint to another DP size is not supported");
  if (!same_rest)
    throw InputError(me + "layout " + describe_layout(saved) + " does not match this run's " + describe_layout(run));
  if (world != run.world_size())
    throw InputError(me + "world size " + std::to_string(world) + " does not match this run's " +
                     std::to_string(run.world_size()));
  if (prec != precision_name(run.precision))
    throw InputError(me + "precision " + printable(prec, 16) + " does not match this run's " +
                     precision_name(run.precision));
  saved.model.L = int_field(m, where, "model", "L");
  saved.model.C = int_field(m, where, "model", "C");
  saved.model.NH = int_field(m, where, "model", "NH");
  saved.model.T = int_field(m, where, "model", "T");
  saved.model.V = int_field(m, where, "model", "V");
  if (describe_model(saved.model) != describe_model(run.model))
    throw InputError(me + "model " + describe_model(saved.model) + " does not match this run's " +
                     describe_model(run.model));
  const json& seed = m.contains("seed") ? m["seed"] : json();
  if (!seed.is_number_unsigned() && !seed.is_number_integer())
    throw InputError(me + "manifest.json lacks 'seed' or it has the wrong type");
  if (seed.get<uint64_t>() != run.seed)
    throw InputError(me + "seed " + std::to_string(seed.get<uint64_t>()) + " does not match this run's " +
                     std::to_string(run.seed));
  const std::string ds = field<std::string>(m, where, "dataset_sha256");
  if (!run.dataset_sha256.empty() && ds != run.dataset_sha256)
    throw InputError(me + "dataset sha256 " + printable(ds, 64) + " does not match this run's " + run.dataset_sha256);
  const auto gb = field<int64_t>(m, where, "train", "global_batch"), sl = field<int64_t>(m, where, "train", "seq_len");
  if (gb != run.global_batch)
    throw InputError(me + "global_batch " + std::to_string(gb) + " does not match this run's " +
                     std::to_string(run.global_batch) + " (the data position is a step of that batch)");
  if (sl != run.seq_len)
    throw InputError(me + "seq_len " + std::to_string(sl) + " does not match this run's " +
                     std::to_string(run.seq_len));
  if (field<bool>(m, where, "loss_scaler", "enabled") != run.loss_scaling)
    throw InputError(me + "loss scaling " + (run.loss_scaling ? "off" : "on") + " does not match this run's " +
                     (run.loss_scaling ? "on" : "off"));
  const auto step = field<int64_t>(m, where, "step");
  if (step < 0) throw InputError(me + "step " + std::to_string(step) + " < 0 in manifest.json");
  if (!m.contains("ranks") || !m["ranks"].is_array() || m["ranks"].size() != size_t(world))
    throw InputError(me + "manifest.json does not list " + std::to_string(world) + " rank files");
  return m;
}

void check_checkpoint_files(const std::string& step_dir, const json& manifest) {
  const json& ranks = manifest.at("ranks");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string name = "rank-" + std::to_string(r) + ".bin", path = (fs::path(step_dir) / name).string();
    const json& e = ranks[r];
    if (!e.is_object() || e.value("file", "") != name || !e.contains("bytes") || !e["bytes"].is_number_unsigned())
      throw InputError("checkpoint " + printable(step_dir) + ": manifest.json's entry for rank " + std::to_string(r) +
                       " is malformed");
    const uint64_t want = e["bytes"].get<uint64_t>();
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw InputError("checkpoint file " + path + ": missing");
    if (!fs::is_regular_file(st)) throw InputError("checkpoint file " + path + ": not a regular file");
    const uint64_t have = fs::file_size(path, ec);
    if (ec) throw InputError("checkpoint file " + path + ": unreadable");
    if (have < want)
      throw InputError("checkpoint file " + path + ": truncated: " + std::to_string(have) + " of " +
                       std::to_string(want) + " bytes");
    if (have != want)
      throw InputError("checkpoint file " + path + ": wrong size: " + std::to_string(have) +
                       " bytes, the manifest says " + std::to_string(want));
  }
}

template <typename T>
std::string save_checkpoint(const std::string& dir, const CheckpointRunInfo& run, ZeroEngine<T>& engine,
                            const TrainProgress& progress, Communicator& world) {
  using A = acc_t<T>;
  DTB_CHECK(run.world_size() == world.size(), "save_checkpoint: the run's layout is not the world's size");
  const int64_t step = progress.next_step;
  const std::string sdir = checkpoint_step_dir(dir, step);
  std::string why;
  if (world.rank() == 0) {  // the step directory, without an older manifest naming other files
    try {
      std::error_code ec;
      fs::create_directories(sdir, ec);
      if (ec) throw InputError("checkpoint directory " + sdir + ": cannot create: " + ec.message());
      const std::string manifest = (fs::path(sdir) / "manifest.json").string();
      if (fs::exists(manifest, ec) && ::unlink(manifest.c_str()) != 0)
        throw InputError("checkpoint " + manifest + ": cannot remove the older manifest: " + errno_text());
      fsync_dir(sdir);
      fsync_dir(dir);
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  agree(world, why);
  // This rank's file.
  FileDigest mine;
  try {
    const ZeroState<T> st = engine.export_state();
    const LossScalerState& sc = progress.scaler;
    std::vector<CheckpointSection> sections;
    CheckpointSection state{"state", "raw", std::vector<char>(kStateBytes)};
    put<int64_t>(state.bytes, 0, step);
    put<int64_t>(state.bytes, 8, st.t);
    put<uint64_t>(state.bytes, 16, run.seed);
    put<double>(state.bytes, 24, sc.scale);
    put<int64_t>(state.bytes, 32, sc.growth_tracker);
    put<int64_t>(state.bytes, 40, sc.skipped);
    sections.push_back(std::move(state));
    auto add = [&](const char* name, const auto& v) {
      using E = typename std::decay_t<decltype(v)>::value_type;
      CheckpointSection s{name, std::string(to_string(dtype_of<E>())), std::vector<char>(v.size() * sizeof(E))};
      if (!v.empty()) std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
      sections.push_back(std::move(s));
    };
    add("params", st.params);
    if (!st.master.empty()) add("master", st.master);
    add("m", st.m);
    add("v", st.v);
    static_assert(sizeof(A) == sizeof(typename ZeroState<T>::A));
    mine = write_rank_file((fs::path(sdir) / ("rank-" + std::to_string(world.rank()) + ".bin")).string(),
                           {world.rank(), world.size(), step}, sections);
  } catch (const InputError& e) {
    why = e.what();
  }
  agree(world, why);  // every rank file is durable past this point
  // Sizes and checksums to rank 0: 2 words of size, 16 of hex digits per rank.
  std::vector<int32_t> word(18, 0), all(18 * size_t(world.size()));
  word[0] = int32_t(uint32_t(mine.bytes));
  word[1] = int32_t(uint32_t(mine.bytes >> 32));
  std::memcpy(word.data() + 2, mine.sha256.data(), 64);
  world.all_gather(word.data(), all.data(), word.size(), DType::i32);
  if (world.rank() == 0) {
    try {
      json ranks = json::array();
      for (int r = 0; r < world.size(); ++r) {
        const int32_t* w = all.data() + 18 * size_t(r);
        const uint64_t bytes = uint64_t(uint32_t(w[0])) | (uint64_t(uint32_t(w[1])) << 32);
        ranks.push_back({{"rank", r},
                         {"file", "rank-" + std::to_string(r) + ".bin"},
                         {"bytes", bytes},
                         {"sha256", std::string(reinterpret_cast<const char*>(w + 2), 64)}});
      }
      const ParallelLayout& l = run.layout;
      const json manifest = {
          {"format", "dtbench-checkpoint"},
          {"format_version", kCheckpointFormatVersion},
          {"step", step},
          {"world_size", world.size()},
          {"layout",
           {{"tp", l.tp},
            {"dp", l.dp},
            {"pp", l.pp},
            {"virtual_stages", l.virtual_stages},
            {"schedule", l.schedule},
            {"zero_stage", run.zero_stage},
            {"offload_optimizer", run.offload_optimizer},
            {"precision", precision_name(run.precision)}}},
          {"model",
           {{"L", run.model.L}, {"C", run.model.C}, {"NH", run.model.NH}, {"T", run.model.T}, {"V", run.model.V}}},
          {"seed", run.seed},
          {"dataset_sha256", run.dataset_sha256},
          {"train", {{"global_batch", run.global_batch}, {"seq_len", run.seq_len}}},
          {"loss_scaler",
           {{"enabled", run.loss_scaling},
            {"scale", progress.scaler.scale},
            {"growth_tracker", progress.scaler.growth_tracker},
            {"skipped", progress.scaler.skipped}}},
          {"adamw_steps", engine.steps_taken()},
          {"history", progress.history},
          {"ranks", ranks}};
      write_file_durably((fs::path(sdir) / "manifest.json").string(), manifest.dump(1) + "\n");
      write_file_durably((fs::path(dir) / "latest").string(), std::to_string(step) + "\n");
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  agree(world, why);
  return sdir;
}

template <typename T>
TrainProgress load_checkpoint(const std::string& step_dir, const CheckpointRunInfo& run, ZeroEngine<T>& engine,
                              LossScaler* scaler, Communicator& world) {
  using A = acc_t<T>;
  DTB_CHECK(run.world_size() == world.size(), "load_checkpoint: the run's layout is not the world's size");
  const int r = world.rank();
  std::string why, manifest_sha;
  TrainProgress p;
  ZeroState<T> st;
  try {
    const json m = check_checkpoint_manifest(step_dir, run);
    {
      const std::vector<char> b = read_all((fs::path(step_dir) / "manifest.json").string(), "checkpoint manifest");
      manifest_sha = sha256_hex(b.data(), b.size(), nullptr, 0);
    }
    const std::string me = "checkpoint " + printable(step_dir) + ": ";
    const int64_t step = field<int64_t>(m, step_dir, "step");
    const json& e = m["ranks"][size_t(r)];
    const std::string name = "rank-" + std::to_string(r) + ".bin";
    if (!e.is_object() || e.value("rank", -1) != r || e.value("file", "") != name || !e.contains("bytes") ||
        !e["bytes"].is_number_unsigned() || !e.contains("sha256") || !e["sha256"].is_string())
      throw InputError(me + "manifest.json's entry for rank " + std::to_string(r) + " is malformed");
    const FileDigest expect{e["bytes"].get<uint64_t>(), e["sha256"].get<std::string>()};
    const std::string path = (fs::path(step_dir) / name).string();
    const std::vector<CheckpointSection> sections = read_rank_file(path, {r, world.size(), step}, &expect);
    const ZeroStateShape shape = engine.state_shape();
    auto find = [&](const std::string& s) -> const CheckpointSection* {
      for (const auto& x : sections)
        if (x.name == s) return &x;
      return nullptr;
    };
    auto take = [&](const char* s, auto& out, size_t count) {
      using E = typename std::decay_t<decltype(out)>::value_type;
      const std::string dt(to_string(dtype_of<E>()));
      const CheckpointSection* x = find(s);
      if (!x) throw InputError("checkpoint file " + path + ": no section '" + s + "'");
      if (x->dtype != dt || x->bytes.size() != count * sizeof(E))
        throw InputError("checkpoint file " + path + ": section '" + s + "' holds " + std::to_string(x->bytes.size()) +
                         " bytes of " + printable(x->dtype, 8) + ", this rank needs " + std::to_string(count) + " " +
                         dt + " values");
      out.resize(count);
      if (count) std::memcpy(out.data(), x->bytes.data(), x->bytes.size());
    };
    take("params", st.params, shape.params);
    if (shape.master > 0) take("master", st.master, shape.master);
    if (shape.master == 0 && find("master"))
      throw InputError("checkpoint file " + path + ": holds master weights this run does not keep");
    take("m", st.m, shape.moments);
    take("v", st.v, shape.moments);
    const CheckpointSection* s = find("state");
    if (!s || s->dtype != "raw" || s->bytes.size() != kStateBytes)
      throw InputError("checkpoint file " + path + ": no valid 'state' section");
    const int64_t next = get<int64_t>(s->bytes, 0);
    st.t = get<int64_t>(s->bytes, 8);
    const uint64_t seed = get<uint64_t>(s->bytes, 16);
    p.next_step = next;
    p.scaler = {get<double>(s->bytes, 24), get<int64_t>(s->bytes, 32), get<int64_t>(s->bytes, 40)};
    if (next != step)
      throw InputError("checkpoint file " + path + ": next step " + std::to_string(next) + ", the manifest says " +
                       std::to_string(step));
    if (seed != run.seed)
      throw InputError("checkpoint file " + path + ": seed " + std::to_string(seed) + " does not match this run's " +
                       std::to_string(run.seed));
    if (st.t < 0 || st.t > next || st.t > std::numeric_limits<int>::max())
      throw InputError("checkpoint file " + path + ": AdamW step count " + std::to_string(st.t) + " is outside [0, " +
                       std::to_string(next) + "]");
    if (scaler && scaler->config().enabled) {
      try {
        validate_loss_scaler_state(scaler->config(), p.scaler);
      } catch (const InputError& x) {
        throw InputError("checkpoint file " + path + ": " + x.what());
      }
    }
    p.history = m.contains("history") ? m["history"] : json::object();
  } catch (const InputError& e) {
    why = e.what();
  }
  agree(world, why);
  // Every rank must have read the same manifest (a shared filesystem, one checkpoint).
  int32_t h[2] = {int32_t(std::stoul(manifest_sha.substr(0, 7), nullptr, 16)), 0};
  h[1] = -h[0];
  world.all_reduce(h, h, 2, DType::i32, ReduceOp::max);  // max(x) == -max(-x) = min(x): all equal
  agree(world, h[0] == -h[1] ? ""
                             : "checkpoint " + printable(step_dir) +
                                   ": the ranks read different manifest.json files (not one shared filesystem?)");
  static_assert(sizeof(A) == sizeof(typename ZeroState<T>::A));
  engine.import_state(st);
  if (scaler && scaler->config().enabled) scaler->set_state(p.scaler);
  return p;
}

#define DTB_INSTANTIATE_CHECKPOINT(T)                                                                                  \
  template std::string save_checkpoint<T>(const std::string&, const CheckpointRunInfo&, ZeroEngine<T>&,                \
                                          const TrainProgress&, Communicator&);                                        \
  template TrainProgress load_checkpoint<T>(const std::string&, const CheckpointRunInfo&, ZeroEngine<T>&, LossScaler*, \
                                            Communicator&);
DTB_INSTANTIATE_CHECKPOINT(float)
DTB_INSTANTIATE_CHECKPOINT(double)
DTB_INSTANTIATE_CHECKPOINT(bf16)
DTB_INSTANTIATE_CHECKPOINT(fp16)
#undef DTB_INSTANTIATE_CHECKPOINT

}  // namespace dtb
