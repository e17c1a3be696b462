#include "suites/calibration.h"

#include <cblas.h>
#include <mpi.h>

#include <cmath>
#include <map>

#include "kernels/error.h"
#include "kernels/timer.h"
#include "suites/stats.h"

namespace dtb {
namespace {

using nlohmann::json;

constexpr int kSgemmSize = 256;        // 33.6 MFLOP: about a millisecond on one core
constexpr size_t kTriadFloats = 1 << 20;  // 3 x 4 MiB: beyond a core's L2, as the model's activations
constexpr int kSamples = 15;

template <typename F>
double median_time(F&& f) {
  f();  // untimed: page faults, a cold cache
  std::vector<double> t;
  for (int i = 0; i < kSamples; ++i) {
    Stopwatch sw;
    f();
    t.push_back(sw.elapsed());
  }
  return median(t);
}

}  // namespace

Calibration measure_calibration(Communicator& world) {
  std::vector<float> a(size_t(kSgemmSize) * kSgemmSize, 0.5f), b(a.size(), 0.25f), c(a.size());
  std::vector<float> x(kTriadFloats, 1.f), y(kTriadFloats, 2.f), z(kTriadFloats);
  world.barrier();
  double t[2];
  t[0] = median_time([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kSgemmSize, kSgemmSize, kSgemmSize, 1.f, a.data(),
                kSgemmSize, b.data(), kSgemmSize, 0.f, c.data(), kSgemmSize);
  });
  t[1] = median_time([&] {
    float* __restrict__ zp = z.data();
    const float* __restrict__ xp = x.data();
    const float* __restrict__ yp = y.data();
    for (size_t i = 0; i < kTriadFloats; ++i) zp[i] = xp[i] + 3.f * yp[i];
  });
  world.all_reduce(t, t, 2, DType::f64, ReduceOp::max);
  return {t[0], t[1]};
}

Calibration combine(const Calibration& before, const Calibration& after) {
  return {std::sqrt(before.sgemm_s * after.sgemm_s), std::sqrt(before.triad_s * after.triad_s)};
}

json calibration_json(const Calibration& before, const Calibration& after) {
  return {{"sgemm_us", {{"before", before.sgemm_s * 1e6}, {"after", after.sgemm_s * 1e6}}},
          {"triad_us", {{"before", before.triad_s * 1e6}, {"after", after.triad_s * 1e6}}}};
}

void apply_calibration(std::vector<json>& records, const Calibration& cal) {
  static const std::map<std::string, double> kUnit = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  for (json& r : records) {
    if (r.contains("real_time_cal") || r.value("skipped", false) || r.value("calibration", "") == "none") continue;
    const double t = r.value("real_time", 0.0);
    const auto unit = kUnit.find(r.value("time_unit", std::string("ms")));
    if (!(t > 0) || unit == kUnit.end()) continue;
    const std::string ref = r.value("calibration", std::string("sgemm"));
    const double ref_s = ref == "triad" ? cal.triad_s : cal.sgemm_s;
    if (!(ref_s > 0)) continue;
    r["calibration"] = ref;
    r["real_time_cal"] = t * unit->second / ref_s;
  }
}

std::function<void()> bare_mpi_call(CollectiveOp op, const MpiCommunicator& mpi, const void* send, void* recv,
                                    size_t count, DType dtype, int root, int next, int prev) {
  if (dtype != DType::f32 && dtype != DType::f64)
    throw InputError("bare MPI calibration: dtype " + std::string(to_string(dtype)) + " is not f32 or f64");
  const MPI_Datatype t = dtype == DType::f32 ? MPI_FLOAT : MPI_DOUBLE;
  const MPI_Comm comm = mpi.comm();
  const int n = int(count);
  switch (op) {
    case CollectiveOp::all_reduce:
      return [=] { MPI_Allreduce(send, recv, n, t, MPI_SUM, comm); };
    case CollectiveOp::all_gather:
      return [=] { MPI_Allgather(send, n, t, recv, n, t, comm); };
    case CollectiveOp::reduce_scatter:
      return [=] { MPI_Reduce_scatter_block(send, recv, n, t, MPI_SUM, comm); };
    case CollectiveOp::broadcast:
      return [=] {
        int me = 0;
        MPI_Comm_rank(comm, &me);
        MPI_Bcast(me == root ? const_cast<void*>(send) : recv, n, t, root, comm);
      };
    case CollectiveOp::sendrecv:
      return [=] { MPI_Sendrecv(send, n, t, next, 0, recv, n, t, prev, 0, comm, MPI_STATUS_IGNORE); };
    case CollectiveOp::all_to_all:
      return [=] { MPI_Alltoall(send, n, t, recv, n, t, comm); };
    case CollectiveOp::all_to_allv: {
      const AlltoallvSplit split = alltoallv_split(mpi.size(), mpi.rank(), count);
      auto ints = [](const std::vector<size_t>& v) { return std::vector<int>(v.begin(), v.end()); };
      return [=, sc = ints(split.send_counts), sd = ints(split.send_displs), rc = ints(split.recv_counts),
              rd = ints(split.recv_displs)] {
        MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm);
      };
    }
  }
  return {};
}

}  // namespace dtb
