// `dtb_bare_mpi`: the peer of the collectives suite for scripts/bench-peers -- a bare loop
// over MPI_Allreduce, MPI_Allgather and MPI_Reduce_scatter_block, timed as nccl-tests and
// the suite time them (warm-up; per repetition a barrier then `iters` calls; time per
// iteration = the slowest rank's; the median over repetitions), with no data check and no
// dtbench code. Sizes and busbw as suites/bandwidth.h defines them. Not a test.
// Usage: mpirun -np N dtb_bare_mpi MIN_BYTES MAX_BYTES STEP WARMUP ITERS REPS MAX_BYTES_PER_BATCH
// Prints one JSON object per (op, size) line on rank 0.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Op {
  const char* name;
  bool split;        // all_gather, reduce_scatter: per-rank count = S / (4 n)
  double bus_factor;  // busbw / algbw on n ranks
};

// One call of op over float buffers: count elements per rank (the gathered and scattered
// ops' per-rank piece), out of place.
void call(int op, float* send, float* recv, int count) {
  switch (op) {
    case 0: MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case 1: MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD); break;
    default: MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 8) {
    if (me == 0)
      std::fprintf(stderr, "usage: dtb_bare_mpi MIN_BYTES MAX_BYTES STEP WARMUP ITERS REPS MAX_BYTES_PER_BATCH\n");
    MPI_Finalize();
    return 2;
  }
  const size_t min_b = std::strtoull(argv[1], nullptr, 10), max_b = std::strtoull(argv[2], nullptr, 10);
  const size_t step = std::strtoull(argv[3], nullptr, 10);
  const int warmup = std::atoi(argv[4]), iters = std::atoi(argv[5]), reps = std::atoi(argv[6]);
  const size_t per_batch = std::strtoull(argv[7], nullptr, 10);
  const Op ops[] = {{"all_reduce", false, 2.0 * (n - 1) / n},
                    {"all_gather", true, double(n - 1) / n},
                    {"reduce_scatter", true, double(n - 1) / n}};
  for (int o = 0; o < 3; ++o) {
    size_t last_bytes = 0;
    for (size_t nominal = min_b; nominal <= max_b;) {
      const size_t count = std::max<size_t>(1, nominal / (4 * (ops[o].split ? size_t(n) : 1)));
      const size_t bytes = count * 4 * (ops[o].split ? size_t(n) : 1);  // S: the full buffer
      if (bytes != last_bytes) {
        last_bytes = bytes;
        const int it = int(std::max<size_t>(1, std::min<size_t>(size_t(iters), per_batch / bytes)));
        const size_t send_len = o == 2 ? count * n : count, recv_len = o == 1 ? count * n : count;
        std::vector<float> send(send_len, 1.f), recv(recv_len, 0.f);
        for (int w = 0; w < warmup; ++w) call(o, send.data(), recv.data(), int(count));
        std::vector<double> per_iter(reps);
        for (int r = 0; r < reps; ++r) {
          MPI_Barrier(MPI_COMM_WORLD);
          const double t0 = MPI_Wtime();
          for (int i = 0; i < it; ++i) call(o, send.data(), recv.data(), int(count));
          per_iter[r] = (MPI_Wtime() - t0) / it;
        }
        // After all repetitions, as the suite: each repetition's slowest rank.
        MPI_Allreduce(MPI_IN_PLACE, per_iter.data(), reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        std::vector<double> sorted = per_iter;
        std::sort(sorted.begin(), sorted.end());
        const double med = reps % 2 ? sorted[reps / 2] : 0.5 * (sorted[reps / 2 - 1] + sorted[reps / 2]);
        if (me == 0) {
          const double algbw = double(bytes) / med / 1e9;
          std::printf("{\"op\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"iters\": %d, \"reps\": %d, "
                      "\"world_size\": %d, \"time_us\": %.6g, \"algbw_GBps\": %.6g, \"busbw_GBps\": %.6g}\n",
                      ops[o].name, bytes, count, it, reps, n, med * 1e6, algbw, algbw * ops[o].bus_factor);
          std::fflush(stdout);
        }
      }
      if (nominal > max_b / step) break;
      nominal *= step;
    }
  }
  MPI_Finalize();
  return 0;
}
