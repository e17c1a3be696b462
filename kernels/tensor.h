// Tensor: a shaped, typed, owned buffer on a Device, tagged with its memory category.
// Row-major and contiguous; no strides, no views with offsets beyond `slice`-free use.
// Ops take raw pointers (llm.c style), so a Tensor is mostly storage plus its shape.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/device.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace dtb {

/// Element types: IEEE float32/float64, bfloat16 and float16 (stored; computed in fp32),
/// and int32 (token ids, counters).
enum class DType { f32, f64, bf16, f16, i32 };
/// Bytes per element: 4, 8, 2, 2, 4.
size_t dtype_size(DType t);
/// "f32", "f64", "bf16", "f16", "i32" (the names configs and reports use).
std::string_view to_string(DType t);

/// The DType of a C++ element type (float, double, bf16, fp16, int32_t).
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<fp16>() { return DType::f16; }

/// A contiguous, row-major buffer of numel(shape) elements of one DType on one Device,
/// accounted under one (category, tier). Copies share the storage (shared ownership); the
/// memory returns to the device, and its accounting, when the last copy goes. A
/// default-constructed Tensor is empty (defined() is false).
class Tensor {
 public:
  Tensor() = default;
  /// Allocates numel(shape) * dtype_size(dtype) bytes on `device`, accounted under (cat, tier).
  /// The memory is uninitialised; use zeros() for zero-filled. Errors: out of memory aborts.
  static Tensor empty(Device& device, std::vector<int64_t> shape, DType dtype, MemCategory cat,
                      Tier tier = Tier::device);
  /// As empty(), then filled with zero bytes (0.0 in every float type).
  static Tensor zeros(Device& device, std::vector<int64_t> shape, DType dtype, MemCategory cat,
                      Tier tier = Tier::device);

  const std::vector<int64_t>& shape() const { return shape_; }
  /// Size of dimension i; negative i counts from the end (-1 is the last). Throws
  /// std::out_of_range for a dimension the tensor does not have.
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  MemCategory category() const { return cat_; }
  Tier tier() const { return tier_; }
  Device* device() const { return device_; }
  bool defined() const { return data_ != nullptr; }
  void* raw() const { return data_.get(); }

  /// Typed pointer; aborts if T does not match dtype().
  template <typename T> T* data() const {
    DTB_CHECK(dtype_of<std::remove_const_t<T>>() == dtype_, "tensor dtype mismatch");
    return static_cast<T*>(data_.get());
  }
  /// Sets every byte to zero. Aborts (error sink) on a tensor not on a CPU device.
  void fill_zero();

 private:
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  MemCategory cat_ = MemCategory::workspace;
  Tier tier_ = Tier::device;
  Device* device_ = nullptr;
  std::shared_ptr<void> data_;
};

}  // namespace dtb
