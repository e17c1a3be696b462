// Tensor storage: one accounted allocation per tensor, freed when the last copy goes.
#include "kernels/tensor.h"

#include <cstring>

namespace dtb {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
  }
  return "?";
}

Tensor Tensor::empty(Device& device, std::vector<int64_t> shape, DType dtype, MemCategory cat,
                     Tier tier) {
  Tensor t;
  t.numel_ = 1;
  for (int64_t d : shape) {
    DTB_CHECK(d >= 0, "negative tensor dimension");
    t.numel_ *= d;
  }
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.cat_ = cat;
  t.tier_ = tier;
  t.device_ = &device;
  const size_t bytes = t.bytes();
  void* p = device.allocate(bytes, cat, tier);
  Device* dev = &device;
  t.data_ = std::shared_ptr<void>(p, [dev, bytes, cat, tier](void* q) { dev->deallocate(q, bytes, cat, tier); });
  return t;
}

Tensor Tensor::zeros(Device& device, std::vector<int64_t> shape, DType dtype, MemCategory cat,
                     Tier tier) {
  Tensor t = empty(device, std::move(shape), dtype, cat, tier);
  t.fill_zero();
  return t;
}

void Tensor::fill_zero() {
  DTB_CHECK(device_ == nullptr || device_->is_cpu(), "fill_zero on a non-CPU tensor");
  if (data_) std::memset(data_.get(), 0, bytes());
}

}  // namespace dtb
