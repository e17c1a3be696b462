// Blocking and asynchronous checkpoint saves (reference/checkpoint/checkpoint_async.h): the phases of
// save_checkpoint (checkpoint_io.h), the middle one, the rank file's write, in a thread.
#include "reference/checkpoint/checkpoint_async.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <thread>

#include "kernels/error.h"
#include "reference/checkpoint/checkpoint_io.h"

namespace dtb {

namespace fs = std::filesystem;
using namespace checkpoint_io;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// A save whose file is being written: the snapshot's sections (owned here until the write
// ends), what the commit needs, and what the thread reports.
template <typename T>
struct CheckpointWriter<T>::InFlight {
  std::string sdir;
  TrainProgress progress;
  int64_t adamw_steps = 0;
  std::vector<CheckpointSection> sections;
  std::thread thread;
  FileDigest digest;  // written by the thread; read after join
  std::string error;  // "" when the file is durable
  double write_s = 0;
  size_t index = 0;   // into timings_
};

template <typename T>
CheckpointWriter<T>::CheckpointWriter(std::string dir, CheckpointRunInfo run, Communicator& world, bool async)
    : dir_(std::move(dir)), run_(std::move(run)), world_(world), async_(async) {
  DTB_CHECK(run_.world_size() == world_.size(), "CheckpointWriter: the run's layout is not the world's size");
}

template <typename T>
CheckpointWriter<T>::~CheckpointWriter() {
  if (flight_ && flight_->thread.joinable()) flight_->thread.join();
}

template <typename T>
std::string CheckpointWriter<T>::save(ZeroEngine<T>& engine, const TrainProgress& progress) {
  std::string committed = async_ ? finish() : std::string();
  const double t0 = now_s();
  const int r = world_.rank();
  auto f = std::make_unique<InFlight>();
  f->sdir = begin_save(dir_, progress.next_step, world_);
  f->progress = progress;
  f->adamw_steps = engine.steps_taken();
  f->sections = rank_sections(engine.export_state(), engine.state_index(), run_, progress);
  f->index = timings_.size();
  SaveTiming st;
  st.step = progress.next_step;
  st.snapshot_s = now_s() - t0;
  timings_.push_back(st);
  const std::string path = (fs::path(f->sdir) / ("rank-" + std::to_string(r) + ".bin")).string();
  const RankFileId id{r, world_.size(), progress.next_step};
  InFlight* p = f.get();
  auto write = [p, path, id] {
    const double w0 = now_s();
    try {
      p->digest = write_rank_file(path, id, p->sections);
    } catch (const std::exception& e) {  // InputError, or bad_alloc: reported at the commit
      p->error = e.what();
    }
    p->write_s = now_s() - w0;
    p->sections.clear();
    p->sections.shrink_to_fit();
  };
  flight_ = std::move(f);
  if (async_) {
    flight_->thread = std::thread(write);
    timings_.back().stall_s = now_s() - t0;  // the commit's wait is added at finish()
    return committed;
  }
  write();
  committed = finish();
  timings_.back().stall_s = now_s() - t0;
  return committed;
}

template <typename T>
std::string CheckpointWriter<T>::finish() {
  if (!flight_) return "";
  const double t0 = now_s();
  std::unique_ptr<InFlight> f = std::move(flight_);
  if (f->thread.joinable()) f->thread.join();
  SaveTiming& st = timings_[f->index];
  st.bytes = f->digest.bytes;
  st.write_s = f->write_s;
  const double c0 = now_s();
  try {
    commit_save(dir_, f->sdir, run_, f->progress, f->adamw_steps, f->digest, f->error, world_);
  } catch (const InputError&) {
    st.commit_s = now_s() - c0;
    if (async_) st.stall_s += now_s() - t0;
    throw;
  }
  st.commit_s = now_s() - c0;
  if (async_) st.stall_s += now_s() - t0;
  return f->sdir;
}

template class CheckpointWriter<float>;
template class CheckpointWriter<double>;
template class CheckpointWriter<bf16>;
template class CheckpointWriter<fp16>;

}  // namespace dtb
