// The checkpoint suite's disk probe, cache drop and working directory (suites/checkpoint_disk.h).
#include "suites/checkpoint_disk.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernels/agreed_error.h"

namespace dtb {

namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string failed(const std::string& path, const char* call) {
  return "checkpoint: disk probe " + path + ": " + call + ": " + std::strerror(errno);
}

std::string probe(const std::string& path, uint64_t bytes, DiskRate& d) {
  std::vector<char> buf(bytes);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = char(i * 2654435761u >> 24);  // not all zeros
  const double t0 = now_s();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed(path, "open");
  for (size_t at = 0; at < buf.size();) {
    const ssize_t n = ::write(fd, buf.data() + at, buf.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ::close(fd), ::unlink(path.c_str()), failed(path, "write");
    at += size_t(n);
  }
  if (::fsync(fd) != 0) return ::close(fd), ::unlink(path.c_str()), failed(path, "fsync");
  ::close(fd);
  d.write_s = now_s() - t0;
  drop_cached(path);
  const double t1 = now_s();
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ::unlink(path.c_str()), failed(path, "open for reading");
  for (size_t at = 0; at < buf.size();) {
    const ssize_t n = ::read(fd, buf.data() + at, buf.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ::close(fd), ::unlink(path.c_str()), failed(path, "read");
    at += size_t(n);
  }
  ::close(fd);
  d.read_s = now_s() - t1;
  ::unlink(path.c_str());
  return "";
}

}  // namespace

DiskRate measure_disk(const std::string& path, uint64_t bytes, Communicator& world) {
  DiskRate d;
  agree_on_error(world, probe(path, std::max<uint64_t>(bytes, 1), d));
  return d;
}

uint64_t rank_file_index_bytes(const std::string& path, const RankFileId& id, Communicator& world) {
  uint64_t bytes = 0;
  std::string why;
  try {
    for (const CheckpointSection& s : read_rank_file(path, id))
      if (s.name.rfind("index.", 0) == 0) bytes += 48 + s.bytes.size();
  } catch (const InputError& e) {
    why = e.what();
  }
  agree_on_error(world, why);
  return bytes;
}

void drop_cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);  // dirty pages are not dropped
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::string shared_work_dir(const std::string& base, Communicator& world) {
  std::string why, made;
  if (world.rank() == 0) {
    std::string tmpl = ((base.empty() ? fs::temp_directory_path() : fs::path(base)) / "dtbench-checkpoint-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      why = "checkpoint: cannot make a directory in " + (base.empty() ? fs::temp_directory_path().string() : base) +
            ": " + std::strerror(errno);
    made = tmpl;
  }
  agree_on_error(world, why);
  std::vector<char> buf(4096, 0);
  if (world.rank() == 0) std::memcpy(buf.data(), made.data(), std::min(made.size(), buf.size() - 1));
  world.broadcast(buf.data(), buf.size() / 4, DType::i32, 0);
  return buf.data();
}

}  // namespace dtb
