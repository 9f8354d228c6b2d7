#pragma once
// Tensor: a contiguous, row-major n-d array with shared storage.
//
// Copies of a Tensor alias the same storage (like a shared_ptr); `clone()` copies the data.
// `reshape` and `slice` return views on the same storage. A Tensor's memory comes from the
// caching allocator of the compute context current on the creating thread, so steady-state
// training never reaches the system allocator for tensor data.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/device.hpp"
#include "lockstep/core/dtype.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/core/shape.hpp"

namespace lockstep {

namespace backend {
class Allocator;
}

/// A block of device memory, returned to its allocator when the last Tensor using it dies.
struct Storage {
  void* data = nullptr;
  std::size_t nbytes = 0;
  // Shared so that memory outliving its device's context (a model kept after its strategy)
  // still has an allocator to return to.
  std::shared_ptr<backend::Allocator> allocator;  // null: not owned (never freed here)
  Device device;
  ~Storage();
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::size_t offset = 0;  // bytes
  Shape shape;
  DType dtype = DType::kF32;
  std::uint64_t id = 0;  // unique per TensorImpl; what GradientTape keys on
  bool trainable_variable = false;  // the value of a trainable Variable: watched by every tape
};

class Tensor {
 public:
  Tensor() = default;

  /// Uninitialised tensor of `shape` on the current compute context's device.
  static Tensor empty(const Shape& shape, DType dtype = DType::kF32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kF32);
  static Tensor ones(const Shape& shape, DType dtype = DType::kF32);
  static Tensor full(const Shape& shape, float value);
  static Tensor scalar(float value);
  /// Copies `values` (numel must equal shape.numel()).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    LOCKSTEP_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), "Tensor::from_vector: ",
                   values.size(), " values cannot fill shape ", shape.str());
    Tensor t = empty(shape, dtype_of_v<T>);
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    return t;
  }

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  Device device() const;
  std::int64_t numel() const { return shape().numel(); }
  std::size_t rank() const { return shape().rank(); }
  std::int64_t dim(int i) const { return shape()[i]; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  std::uint64_t id() const;

  void* raw_data();
  const void* raw_data() const;
  /// Typed pointer; throws ValueError when T does not match dtype().
  template <typename T>
  T* data() {
    check_dtype(dtype_of_v<T>);
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    check_dtype(dtype_of_v<T>);
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  std::vector<T> to_vector() const {
    std::vector<T> v(static_cast<std::size_t>(numel()));
    if (!v.empty()) std::memcpy(v.data(), data<T>(), v.size() * sizeof(T));
    return v;
  }
  /// The single value of a one-element tensor, converted to float.
  float item() const;

  /// Deep copy into fresh storage.
  Tensor clone() const;
  /// View with a new shape of the same numel; one dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  /// View of rows [begin, end) along dimension 0.
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  /// Converts to another dtype (a copy; a clone when the dtype is the same).
  Tensor to(DType dtype) const;
  /// Copies src's values into this tensor in place (same numel and dtype).
  void copy_from(const Tensor& src);
  /// True when both alias the same TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  /// "Tensor(shape=(2, 3), dtype=float32, [1, 2, ...])"
  std::string str(int max_values = 8) const;

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

 private:
  void check_dtype(DType expected) const;
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace lockstep
