// The checkpoint suite's filesystem side (suites/checkpoint.cc): the disk's own sequential
// write (+ fsync) and read rate for a size, as `dd conv=fsync` and a read of the file with its
// pages dropped from the cache, the cache drop itself, and the run's working directory.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/comm/communicator.h"
#include "reference/checkpoint/checkpoint.h"

namespace dtb {

/// One probe of this rank's disk, seconds.
struct DiskRate {
  double write_s = 0;  // open, write `bytes`, fsync, close
  double read_s = 0;   // the same file read whole after its pages were dropped from the cache
};

/// Writes `bytes` (at least 1) to `path` and reads them back, then removes it; every rank at
/// once (collective over `world`: failures are agreed). Errors: AgreedInputError "checkpoint:
/// disk probe <path>: <failed call>: <strerror>", the lowest failing rank's, on every rank.
DiskRate measure_disk(const std::string& path, uint64_t bytes, Communicator& world);

/// The bytes of rank file `path`'s resharding index (its "index.*" sections with their 48-byte
/// table entries), the file read and verified as read_rank_file does (written by rank `id.rank`
/// of `id.world_size` at `id.step`). Collective over `world` (every rank its own file): a file
/// found damaged is agreed. Errors: AgreedInputError "checkpoint file <path>: <what is wrong>"
/// (truncated, checksum mismatch, ...), the lowest failing rank's, on every rank.
uint64_t rank_file_index_bytes(const std::string& path, const RankFileId& id, Communicator& world);

/// Asks the kernel to drop `path`'s clean pages from the page cache (posix_fadvise
/// DONTNEED), so that the next read comes from the disk. Local; best effort (no error).
void drop_cached(const std::string& path);

/// A fresh directory `base`/dtbench-checkpoint-XXXXXX (base "" : the system's temporary
/// directory) made by rank 0 and broadcast. Collective. Errors: AgreedInputError on every rank.
std::string shared_work_dir(const std::string& base, Communicator& world);

}  // namespace dtb
