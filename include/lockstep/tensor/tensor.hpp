#pragma once
// Tensor: a contiguous, row-major n-d array with shared storage.
//
// Copies of a Tensor alias the same storage (like a shared_ptr); `clone()` copies the data.
// `reshape` and `slice` return views on the same storage. A Tensor's memory comes from the
// caching allocator of the compute context current on the creating thread, so steady-state
// training never reaches the system allocator for tensor data.
#include <cstdint>
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
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kF32);
  static Tensor scalar(double value, DType dtype = DType::kF32);
  /// A tensor over `data`, memory it does not own and never frees (on `device`, the host by
  /// default): memory that something else maps, such as the segment the workers of one
  /// machine share. The memory must outlive the tensor and every view of it.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, const Device& device = {});
  /// Copies `values` (numel must equal shape.numel()) onto the current context's device.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    LOCKSTEP_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), "Tensor::from_vector: ",
                   values.size(), " values cannot fill shape ", shape.str());
    Tensor t = empty(shape, dtype_of_v<T>);
    t.copy_from_host(values.data(), values.size() * sizeof(T));
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

  /// The address of element 0 on the tensor's device (a host address only for CPU tensors).
  /// For the backend, the tensor layer and host file readers/writers; everything else
  /// computes through ops (scripts/check_raw_access.sh enforces it).
  void* raw_data();
  const void* raw_data() const;
  /// Typed host pointer; throws ValueError when T does not match dtype() or the tensor is not
  /// in host memory.
  template <typename T>
  T* data() {
    check_host_access(dtype_of_v<T>);
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    check_host_access(dtype_of_v<T>);
    return static_cast<const T*>(raw_data());
  }
  /// The values, copied to the host (T must be dtype()).
  template <typename T>
  std::vector<T> to_vector() const {
    check_dtype(dtype_of_v<T>);
    std::vector<T> v(static_cast<std::size_t>(numel()));
    copy_to_host(v.data(), v.size() * sizeof(T));
    return v;
  }
  /// Host <-> device copies of `bytes` starting `byte_offset` into this tensor's elements.
  void copy_to_host(void* dst, std::size_t bytes, std::size_t byte_offset = 0) const;
  void copy_from_host(const void* src, std::size_t bytes, std::size_t byte_offset = 0);
  /// The single value of a one-element tensor, converted to float.
  float item() const;

  /// Deep copy into fresh storage.
  Tensor clone() const;
  /// View with a new shape of the same numel; one dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  /// View of rows [begin, end) along dimension 0.
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  /// Converts to another dtype (a copy; this tensor itself when it has that dtype). Floats to
  /// ints truncate toward zero (saturating); float32 to float16/bfloat16 rounds to nearest even.
  Tensor to(DType dtype) const;
  /// The same values on `device` (this tensor itself when it is already there). Memory comes
  /// from the current context when it is that device's, else from the device's default context.
  Tensor to(const Device& device) const;
  /// This tensor if its memory is the host's (any CPU device), else its values copied to the
  /// host: what a writer of files or bytes reads (a model trained on a GPU is saved from there).
  Tensor on_host() const;
  /// Copies src's values into this tensor in place (same numel and dtype; any device).
  void copy_from(const Tensor& src);
  /// Sets every element to `value` (converted to the dtype) in place.
  void fill_(double value);
  /// True when both have the same shape, dtype and bytes.
  bool bitwise_equal(const Tensor& other) const;
  /// True when both alias the same TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  /// "Tensor(shape=(2, 3), dtype=float32, [1, 2, ...])"
  std::string str(int max_values = 8) const;

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

 private:
  void check_dtype(DType expected) const;
  void check_host_access(DType expected) const;
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace lockstep
