#include "kernels/cpu/blas_threads.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>

namespace dtb {

void set_blas_thread_timeout(char** argv) {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return;  // the user's, or ours after exec
  if (openblas_get_num_threads() <= 1) return;                      // no worker thread to idle
  if (setenv("OPENBLAS_THREAD_TIMEOUT", "16", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_THREAD_TIMEOUT");  // reached only when the exec failed
}

}  // namespace dtb
