#include "kernels/cpu/blas_threads.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace dtb {

void set_blas_thread_timeout(char** argv) {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return;  // the user's, or ours after exec
  if (openblas_get_num_threads() <= 1) return;                      // no worker thread to idle
  // Not under valgrind (its preload library is in LD_PRELOAD): the exec would leave it, or
  // fail. Only when /proc/self/exe is this program, as argv[0] names it: under `ld.so
  // PROGRAM` it is the loader, which would not run argv as given.
  if (const char* pre = std::getenv("LD_PRELOAD"); pre && std::strstr(pre, "vgpreload")) return;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || argv == nullptr || argv[0] == nullptr ||
      self.filename() != std::filesystem::path(argv[0]).filename())
    return;
  if (setenv("OPENBLAS_THREAD_TIMEOUT", "16", 1) != 0) return;
  execv(self.c_str(), argv);
  unsetenv("OPENBLAS_THREAD_TIMEOUT");  // reached only when the exec failed
}

}  // namespace dtb
