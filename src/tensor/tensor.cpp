#include "lockstep/tensor/tensor.hpp"

#include <atomic>
#include <cstdio>

#include "backend/context.hpp"

namespace lockstep {

namespace {
std::atomic<std::uint64_t> g_next_id{1};

template <typename Src, typename Dst>
void convert(const void* s, void* d, std::int64_t n) {
  const Src* src = static_cast<const Src*>(s);
  Dst* dst = static_cast<Dst*>(d);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src[i]);
}

template <typename Dst>
void convert_from(DType from, const void* s, void* d, std::int64_t n) {
  switch (from) {
    case DType::kF32: return convert<float, Dst>(s, d, n);
    case DType::kI32: return convert<std::int32_t, Dst>(s, d, n);
    case DType::kI64: return convert<std::int64_t, Dst>(s, d, n);
    case DType::kU8: return convert<std::uint8_t, Dst>(s, d, n);
    default: throw ValueError(std::string("Tensor::to: conversion from ") + dtype_name(from) + " is not supported");
  }
}
}  // namespace

Storage::~Storage() {
  if (allocator) allocator->release(data, nbytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (auto d : shape.dims()) LOCKSTEP_CHECK(d >= 0, "Tensor::empty: negative dimension in shape ", shape.str());
  auto& ctx = backend::current_context();
  auto storage = std::make_shared<Storage>();
  storage->nbytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  storage->data = ctx.allocator().allocate(storage->nbytes);
  storage->allocator = ctx.allocator_ptr();
  storage->device = ctx.device();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = dtype;
  impl->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = value;
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) {
  return dtype == DType::kF32 ? full(shape, 1.0f) : full(shape, 1.0f).to(dtype);
}

Tensor Tensor::scalar(float value) { return full(Shape{}, value); }

const Shape& Tensor::shape() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined (empty) Tensor");
  return impl_->shape;
}
DType Tensor::dtype() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined (empty) Tensor");
  return impl_->dtype;
}
Device Tensor::device() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined (empty) Tensor");
  return impl_->storage->device;
}
std::uint64_t Tensor::id() const { return impl_ ? impl_->id : 0; }

void* Tensor::raw_data() {
  LOCKSTEP_CHECK(impl_, "use of an undefined (empty) Tensor");
  return static_cast<char*>(impl_->storage->data) + impl_->offset;
}
const void* Tensor::raw_data() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined (empty) Tensor");
  return static_cast<const char*>(impl_->storage->data) + impl_->offset;
}

void Tensor::check_dtype(DType expected) const {
  LOCKSTEP_CHECK(dtype() == expected, "tensor of dtype ", dtype_name(dtype()), " accessed as ",
                 dtype_name(expected));
}

float Tensor::item() const {
  LOCKSTEP_CHECK(numel() == 1, "Tensor::item needs exactly one element, got shape ", shape().str());
  float v = 0;
  convert_from<float>(dtype(), raw_data(), &v, 1);
  return v;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype());
  if (nbytes()) std::memcpy(t.raw_data(), raw_data(), nbytes());
  return t;
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  std::vector<std::int64_t> dims = new_shape.dims();
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      LOCKSTEP_CHECK(infer < 0, "reshape ", shape().str(), " -> ", new_shape.str(), ": more than one -1");
      infer = static_cast<int>(i);
    } else {
      LOCKSTEP_CHECK(dims[i] >= 0, "reshape: negative dimension in ", new_shape.str());
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    LOCKSTEP_CHECK(known > 0 && numel() % known == 0, "cannot reshape ", shape().str(), " (", numel(),
                   " values) into ", new_shape.str());
    dims[static_cast<std::size_t>(infer)] = numel() / known;
  }
  Shape s(std::move(dims));
  LOCKSTEP_CHECK(s.numel() == numel(), "cannot reshape ", shape().str(), " (", numel(), " values) into ",
                 new_shape.str());
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape = std::move(s);
  impl->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  impl->trainable_variable = false;
  return Tensor(std::move(impl));
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  LOCKSTEP_CHECK(rank() >= 1, "slice of a scalar tensor");
  const std::int64_t n = dim(0);
  LOCKSTEP_CHECK(0 <= begin && begin <= end && end <= n, "slice [", begin, ", ", end,
                 ") out of range for dimension 0 of shape ", shape().str());
  auto impl = std::make_shared<TensorImpl>(*impl_);
  const std::int64_t row = n ? numel() / n : 0;
  impl->offset += static_cast<std::size_t>(begin * row) * dtype_size(dtype());
  impl->shape.dims()[0] = end - begin;
  impl->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  impl->trainable_variable = false;
  return Tensor(std::move(impl));
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return clone();
  Tensor t = empty(shape(), target);
  switch (target) {
    case DType::kF32: convert_from<float>(dtype(), raw_data(), t.raw_data(), numel()); break;
    case DType::kI32: convert_from<std::int32_t>(dtype(), raw_data(), t.raw_data(), numel()); break;
    case DType::kI64: convert_from<std::int64_t>(dtype(), raw_data(), t.raw_data(), numel()); break;
    case DType::kU8: convert_from<std::uint8_t>(dtype(), raw_data(), t.raw_data(), numel()); break;
    default: throw ValueError(std::string("Tensor::to: conversion to ") + dtype_name(target) + " is not supported");
  }
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  LOCKSTEP_CHECK(src.numel() == numel() && src.dtype() == dtype(), "copy_from: source ", src.shape().str(), " ",
                 dtype_name(src.dtype()), " does not fit destination ", shape().str(), " ", dtype_name(dtype()));
  if (nbytes() && raw_data() != src.raw_data()) std::memcpy(raw_data(), src.raw_data(), nbytes());
}

std::string Tensor::str(int max_values) const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = "Tensor(shape=" + shape().str() + ", dtype=" + dtype_name(dtype()) + ", [";
  const std::int64_t n = std::min<std::int64_t>(numel(), max_values);
  Tensor f = dtype() == DType::kF32 ? *this : to(DType::kF32);
  const float* p = f.data<float>();
  char buf[32];
  for (std::int64_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", static_cast<double>(p[i]));
    s += buf;
  }
  if (numel() > n) s += ", ...";
  return s + "])";
}

}  // namespace lockstep
