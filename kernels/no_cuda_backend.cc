// The CUDA backend's entry points in a build without CUDA: they say so.
#include "kernels/backend.h"
#include "kernels/error.h"

namespace dtb {

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw InputError("backend 'cuda': this dtbench was built without CUDA (nvcc not found, or -DDTB_CUDA=OFF)");
}

std::vector<std::string> backend_names() { return {"cpu"}; }

}  // namespace dtb
