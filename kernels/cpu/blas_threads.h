// How long OpenBLAS's idle worker threads spin, set before OpenBLAS starts them.
#pragma once

namespace dtb {

/// OPENBLAS_THREAD_TIMEOUT when the user has not set it: 16, so that OpenBLAS's idle worker
/// threads spin for 2^16 cycles (~25 us) after a gemm, then sleep. OpenBLAS's default (2^28
/// cycles, ~0.1 s) keeps them spinning through the ops between gemms (layernorm, GELU,
/// softmax, AdamW, and attention's own threads, kernels/cpu/attention.cc), which then share the
/// cores with them: at 2 OpenBLAS threads on 2 cores the training step of the GPT-2-shaped
/// config took 976 ms with the default and 861 ms with 16, small's 270 and 222 ms, tiny's 5.2
/// and 3.7 ms (one run each of the issue-9 configs' forward, backward and AdamW; 16, 20 and
/// 24 were tried: 16 was best or within 2%). OpenBLAS reads the variable once, as it loads
/// (`driver/others/openblas_env.c`), so when it is unset and OpenBLAS may use more than one
/// thread, this sets it and re-executes this program (/proc/self/exe's target) with the same
/// argv; otherwise it returns. Not under valgrind (LD_PRELOAD holds its vgpreload library), nor
/// when /proc/self/exe is another program than argv[0] names (the loader, under `ld.so
/// PROGRAM`): those keep OpenBLAS's default. Call it first in
/// main(), before MPI_Init and before the program starts threads of its own (OpenBLAS's
/// workers, started as it loads, end with the exec). A user's value is kept. Raises nothing:
/// if the re-execution fails, the program goes on with OpenBLAS's default.
void set_blas_thread_timeout(char** argv);

}  // namespace dtb
