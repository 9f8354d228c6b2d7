#include "lockstep/tensor/tensor.hpp"

#include <cstring>
#include <atomic>
#include <cstdio>
#include <limits>

#include "backend/kernels.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/host_reads.hpp"
#include "tensor/kernel_launches.hpp"
#include "tensor/op_util.hpp"
#include "tensor/tensor_parts.hpp"
#include "tensor/write_at.hpp"

namespace lockstep {

namespace {
std::atomic<std::uint64_t> g_next_id{1};

backend::ComputeContext& ctx() { return backend::current_context(); }
const backend::DeviceOps& dev_ops(const Device& d) {
  const backend::DeviceOps& ops = backend::device_ops(d.kind);
  LOCKSTEP_CHECK(ops.copy, "tensors on ", d.str(), " are not supported: this lockstep has no backend for it");
  return ops;
}
const backend::KernelTable& table(const Tensor& t, backend::KernelOp op, const char* what) {
  const Device d = t.device();
  detail::check_context_kind(what, t);
  LOCKSTEP_CHECK(backend::supports(d.kind, t.dtype(), op), what, ": no ", backend::kernel_op_name(op),
                 " kernel for dtype ", dtype_name(t.dtype()), " on ", d.str());
  detail::note_kernel_launch(d, op);
  return backend::kernels(d.kind, t.dtype());
}
}  // namespace

namespace {
std::shared_ptr<TensorImpl> new_impl(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = dtype;
  impl->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  return impl;
}
}  // namespace

Storage::~Storage() {
  if (allocator) allocator->release(data, nbytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (auto d : shape.dims()) LOCKSTEP_CHECK(d >= 0, "Tensor::empty: negative dimension in shape ", shape.str());
  auto& ctx = backend::current_context();
  auto storage = std::make_shared<Storage>();
  const std::int64_t numel = shape.numel();
  LOCKSTEP_CHECK(numel <= std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(dtype_size(dtype)),
                 "Tensor::empty: ", shape.str(), " ", dtype_name(dtype), " needs more bytes than fit in 64 bits");
  storage->nbytes = static_cast<std::size_t>(numel) * dtype_size(dtype);
  try {
    storage->data = ctx.allocator().allocate(storage->nbytes);
  } catch (const ResourceError& e) {
    throw ResourceError(::lockstep::detail::concat("Tensor::empty ", shape.str(), " ", dtype_name(dtype), " on ",
                                                   ctx.device().str(), ": ", e.what()));
  }
  storage->allocator = ctx.allocator_ptr();
  storage->device = ctx.device();
  return Tensor(new_impl(std::move(storage), shape, dtype));
}

std::vector<Tensor> detail::empty_parts(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
                                        std::size_t align, std::vector<std::size_t>& offsets) {
  offsets.clear();
  offsets.reserve(shapes.size());  // one allocation, not one per doubling (an upload per replica and step)
  std::size_t end = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    for (auto d : shapes[i].dims())
      LOCKSTEP_CHECK(d >= 0, "Tensor::empty: negative dimension in shape ", shapes[i].str());
    offsets.push_back((end + align - 1) / align * align);
    end = offsets.back() + static_cast<std::size_t>(shapes[i].numel()) * dtype_size(dtypes[i]);
  }
  auto& c = ctx();
  // One allocation for the Storages too: element 0 owns the memory (released when the last part's
  // tensor is gone), element 1 + i is tensor i's.
  const std::shared_ptr<Storage[]> storages = std::make_shared<Storage[]>(shapes.size() + 1);
  Storage& whole = storages[0];
  whole.nbytes = end;
  try {
    whole.data = c.allocator().allocate(end);
  } catch (const ResourceError& e) {
    throw ResourceError(::lockstep::detail::concat("Tensor::empty: ", shapes.size(), " tensors of ", end,
                                                   " bytes in all on ", c.device().str(), ": ", e.what()));
  }
  whole.allocator = c.allocator_ptr();
  whole.device = c.device();
  std::vector<Tensor> out;
  out.reserve(shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Storage& part = storages[i + 1];  // no allocator: freed as the whole
    part.data = static_cast<char*>(whole.data) + offsets[i];
    part.nbytes = static_cast<std::size_t>(shapes[i].numel()) * dtype_size(dtypes[i]);
    part.device = whole.device;
    out.emplace_back(new_impl(std::shared_ptr<Storage>(storages, &part), shapes[i], dtypes[i]));
  }
  return out;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, const Device& device) {
  for (auto d : shape.dims()) LOCKSTEP_CHECK(d >= 0, "Tensor::wrap: negative dimension in shape ", shape.str());
  auto storage = std::make_shared<Storage>();
  storage->data = data;
  storage->nbytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  storage->device = device;  // no allocator: never freed here
  return Tensor(new_impl(std::move(storage), shape, dtype));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  dev_ops(t.device()).zero(ctx(), t.raw_data(), t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

void Tensor::fill_(double value) {
  detail::forget_host_copy(*this);
  table(*this, backend::KernelOp::kFill, "fill").fill(ctx(), raw_data(), numel(), value);
}

void Tensor::copy_to_host(void* dst, std::size_t bytes, std::size_t byte_offset) const {
  LOCKSTEP_CHECK(byte_offset + bytes <= nbytes(), "copy_to_host: bytes [", byte_offset, ", ", byte_offset + bytes,
                 ") are outside the tensor's ", nbytes());
  if (StepCaptureCheck* check = current_step_capture_check()) [[unlikely]]
    check->block("a read of a " + shape().str() + " tensor's values on the host (the host waits for the device there)");
  if (!bytes) return;
  detail::note_host_read(device(), detail::HostRead::kCopyToHost);
  dev_ops(device()).copy_to_host(ctx(), dst, static_cast<const char*>(raw_data()) + byte_offset, bytes);
  if (device().kind != DeviceKind::kCpu) detail::raise_marked_errors();  // the host waited: a device check's error
}

void Tensor::copy_from_host(const void* src, std::size_t bytes, std::size_t byte_offset) {
  LOCKSTEP_CHECK(byte_offset + bytes <= nbytes(), "copy_from_host: bytes [", byte_offset, ", ", byte_offset + bytes,
                 ") are outside the tensor's ", nbytes());
  if (StepCaptureCheck* check = current_step_capture_check()) [[unlikely]]
    check->block("a copy of host memory into a " + shape().str() +
                 " tensor (a replay would copy what that memory holds then)");
  if (!bytes) return;
  detail::forget_host_copy(*this);
  dev_ops(device()).copy_from_host(ctx(), static_cast<char*>(raw_data()) + byte_offset, src, bytes);
}

bool Tensor::bitwise_equal(const Tensor& o) const {
  if (shape() != o.shape() || dtype() != o.dtype()) return false;
  LOCKSTEP_CHECK(device().kind == o.device().kind, "bitwise_equal: tensors on ", device().str(), " and ",
                 o.device().str());
  detail::note_host_read(device(), detail::HostRead::kBitwiseEqual);
  const bool equal = dev_ops(device()).equal_bytes(ctx(), raw_data(), o.raw_data(), nbytes());
  if (device().kind != DeviceKind::kCpu) detail::raise_marked_errors();
  return equal;
}

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

void Tensor::check_host_access(DType expected) const {
  check_dtype(expected);
  LOCKSTEP_CHECK(device().kind == DeviceKind::kCpu, "tensor on ", device().str(),
                 " is not in host memory: copy it with to(Device{}) or to_vector() first");
}

float Tensor::item() const {
  LOCKSTEP_CHECK(numel() == 1, "Tensor::item needs exactly one element, got shape ", shape().str());
  const Tensor f = dtype() == DType::kF32 ? *this : to(DType::kF32);
  float v = 0;
  f.copy_to_host(&v, sizeof v);
  return v;
}

Tensor Tensor::clone() const {
  // On the current context's device, which may be of another kind (a host value mirrored onto
  // a GPU): copy_from picks the copy.
  Tensor t = empty(shape(), dtype());
  t.copy_from(*this);
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
  if (target == dtype()) return *this;
  const auto& k = table(*this, backend::KernelOp::kCast, "Tensor::to");
  Tensor t = empty(shape(), target);
  LOCKSTEP_CHECK(t.device().kind == device().kind, "Tensor::to(", dtype_name(target), "): the tensor is on ",
                 device().str(), " but the current context is ", t.device().str());
  k.cast(ctx(), raw_data(), target, t.raw_data(), numel());
  return t;
}

Tensor Tensor::on_host() const { return device().kind == DeviceKind::kCpu ? *this : to(Device{}); }

Tensor Tensor::to(const Device& target) const {
  if (device() == target) return *this;
  // The memory comes from the current context when it is of the target's kind (for the CPU,
  // all logical devices share host memory), else from a context the registry builds for the
  // target (it throws, naming the device, when that backend is not built).
  backend::ComputeContext* cur = &backend::current_context();
  std::shared_ptr<backend::ComputeContext> made;
  if (cur->device().kind != target.kind) {
    made = backend::make_context(target, {});
    cur = made.get();
  }
  backend::ContextGuard guard(*cur);
  Tensor t = empty(shape(), dtype());
  t.impl_->storage->device = target;
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  LOCKSTEP_CHECK(src.numel() == numel() && src.dtype() == dtype(), "copy_from: source ", src.shape().str(), " ",
                 dtype_name(src.dtype()), " does not fit destination ", shape().str(), " ", dtype_name(dtype()));
  detail::write_at(*this, 0, src);
}

void detail::write_at(Tensor& dst, std::int64_t at, const Tensor& src) {
  LOCKSTEP_CHECK(src.dtype() == dst.dtype() && at >= 0 && at + src.numel() <= dst.numel(), "write_at: source ",
                 src.shape().str(), " ", dtype_name(src.dtype()), " does not fit destination ", dst.shape().str(), " ",
                 dtype_name(dst.dtype()), " from element ", at);
  const std::size_t bytes = src.nbytes();
  void* to_data = static_cast<char*>(dst.raw_data()) + static_cast<std::size_t>(at) * dtype_size(dst.dtype());
  if (!bytes || to_data == src.raw_data()) return;
  forget_host_copy(dst);
  const Device from = src.device(), to = dst.device();
  if (from.kind == to.kind) {
    // Between two GPUs the host waits for both (the source may still be written, and the copy
    // must be done before either reuses the memory): counted with the reads.
    if (from.index != to.index) note_host_read(to, HostRead::kCopyBetweenDevices);
    dev_ops(to).copy(ctx(), to_data, src.raw_data(), bytes);
  } else if (from.kind == DeviceKind::kCpu) {
    dev_ops(to).copy_from_host(ctx(), to_data, src.raw_data(), bytes);
  } else if (to.kind == DeviceKind::kCpu) {
    note_host_read(from, HostRead::kCopyToHost);
    dev_ops(from).copy_to_host(ctx(), to_data, src.raw_data(), bytes);
    raise_marked_errors();
  } else {
    write_at(dst, at, src.to(Device{}));  // between two non-host kinds: through the host
  }
}

std::string Tensor::str(int max_values) const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = "Tensor(shape=" + shape().str() + ", dtype=" + dtype_name(dtype()) + ", [";
  const std::int64_t n = std::min<std::int64_t>(numel(), max_values);
  const std::vector<float> p = (dtype() == DType::kF32 ? *this : to(DType::kF32)).to_vector<float>();
  char buf[32];
  for (std::int64_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", static_cast<double>(p[i]));
    s += buf;
  }
  if (numel() > n) s += ", ...";
  return s + "])";
}

}  // namespace lockstep
