#include "lockstep/tensor/device_upload.hpp"

#include <string>
#include <utility>

#include "backend/context.hpp"
#include "backend/kernels.hpp"
#include "backend/staged_copy.hpp"
#include "lockstep/core/error.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/tensor_parts.hpp"

namespace lockstep {

namespace {
// Where each component of a batch starts in its block and its device memory: cudaMalloc's
// alignment, so that a component's kernels see memory aligned as a tensor of its own.
constexpr std::size_t kPartAlign = 256;
}  // namespace

struct DeviceUpload::State {
  backend::ComputeContext* ctx = nullptr;
  const backend::DeviceOps* ops = nullptr;  // null: the device works in order (take() hands out the host tensors)
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<Tensor> tensors;  // on the device (reserved or given), or the host tensors
  void* after = nullptr;        // the fence before which the reserved memory may still be in use
  void* done = nullptr;         // the copies' fence
  bool started = false, taken = false;
  bool given = false;           // the caller's buffers (DeviceUpload(buffers))
  const backend::StagedCopyOps* staging = nullptr;  // where blocks are lent for stage()
  // Reserved tensors: the components at `offsets` of one device allocation (`device`), copied
  // there from one block (`batch`) laid out the same way, `span` bytes: up to the end of the
  // last component that has any.
  std::vector<std::size_t> offsets;
  std::size_t span = 0;
  void* device = nullptr;
  backend::StagedHost batch;
  bool batch_asked = false;
  std::vector<backend::StagedHost> staged;  // blocks lent by tensor (where there is no batch block), until start()

  ~State() { release_staged(); }
  void release_staged() noexcept {
    if (batch.lease) staging->release(std::exchange(batch, {}));
    for (backend::StagedHost& b : staged)
      if (b.lease) staging->release(b);
    staged.clear();
  }

  // Where copies run beside the device's work: the device memory of the whole batch, one
  // allocation (one_block()), component 0 at its start. Memory that cannot be had leaves no
  // fence behind (a CUDA event out of its pool for good).
  void reserve_device() {
    if (!order_after_queued_work()) return;
    try {
      tensors = detail::empty_parts(shapes, dtypes, kPartAlign, offsets);
    } catch (...) {
      settle();
      throw;
    }
    for (std::size_t i = 0; i < shapes.size(); ++i)
      if (bytes(i)) span = offsets[i] + bytes(i);
    if (!tensors.empty()) device = tensors[0].raw_data();
  }

  // Back to a state reserved for nothing, keeping the vectors' memory (the fences settled).
  void clear() noexcept {
    release_staged();
    ctx = nullptr;
    ops = nullptr;
    staging = nullptr;
    tensors.clear();
    started = taken = given = batch_asked = false;
    span = 0;
    device = nullptr;
  }

  std::size_t bytes(std::size_t i) const { return static_cast<std::size_t>(shapes[i].numel()) * dtype_size(dtypes[i]); }

  // On the current context: where copies run beside the device's work, marks the work queued so
  // far (the memory may still be read by it: the copy waits for it) and returns true.
  bool order_after_queued_work() {
    ctx = &backend::current_context();
    const backend::DeviceOps& o = backend::device_ops(ctx->device().kind);
    if (!o.copy_from_host_beside) return false;
    ops = &o;
    staging = backend::staged_copy_ops(ctx->device().kind);
    after = o.record_fence(*ctx, false);
    return true;
  }

  // The one choice of how a batch goes: where one block is lent for all of it (asked once), its
  // components share it and one transfer (copy_batch). Otherwise (the caller's buffers, apart in
  // device memory; no block of the batch's size to be lent now: over a block's size, or the pool
  // on loan) each component goes on its own (copy_each).
  bool one_block() {
    if (!batch_asked && staging && device && span) {
      batch_asked = true;
      batch = staging->acquire(*ctx, span);
    }
    return batch.lease != nullptr;
  }

  // The batch's block, filled where the caller did not gather a component into it, copied to the
  // device in one transfer after `after`.
  void copy_batch(const std::vector<Tensor>& host) {
    const char* const block = static_cast<const char*>(batch.host);
    const auto gathered_there = [&](std::size_t i) { return host[i].raw_data() == block + offsets[i]; };
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (!host[i].nbytes()) continue;
      detail::forget_host_copy(tensors[i]);
      if (!gathered_there(i))
        backend::fill_staged(ctx->device().kind, batch, offsets[i], host[i].raw_data(), host[i].nbytes());
    }
    staging->copy_beside(*ctx, device, std::exchange(batch, {}), span, std::exchange(after, nullptr));
    for (std::size_t i = 0; i < host.size(); ++i)  // batches gathered for this copy (the block is lent again)
      if (host[i].nbytes() && !gathered_there(i)) detail::remember_host_copy(tensors[i], host[i]);
  }

  // Each component in a copy of its own, the first one after `after` (the copy stream keeps the
  // rest in order): from the block lent to it by stage(), or as DeviceOps::copy_from_host_beside.
  void copy_each(const std::vector<Tensor>& host) {
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (!host[i].nbytes()) continue;
      detail::forget_host_copy(tensors[i]);
      void* const first_after = std::exchange(after, nullptr);
      backend::StagedHost* block = i < staged.size() ? &staged[i] : nullptr;
      if (block && block->lease && host[i].raw_data() == block->host) {  // the caller filled the block
        staging->copy_beside(*ctx, tensors[i].raw_data(), std::exchange(*block, {}), host[i].nbytes(), first_after);
        continue;  // (the block is lent again: its bytes are no host copy to keep)
      }
      ops->copy_from_host_beside(*ctx, tensors[i].raw_data(), host[i].raw_data(), host[i].nbytes(), first_after);
      detail::remember_host_copy(tensors[i], host[i]);  // a batch gathered for this copy
    }
  }

  // Consumes the fences left: the device's later work waits for them, so that memory freed
  // after this is not written by a copy still running. Never throws (a destructor calls it).
  void settle() noexcept {
    for (void** f : {&after, &done}) {
      if (!*f) continue;
      try {
        ops->wait_fence(*ctx, *f);
      } catch (...) {  // a failed device: nothing left to order
      }
      *f = nullptr;
    }
  }
};

DeviceUpload::DeviceUpload() = default;

DeviceUpload::DeviceUpload(std::vector<Shape> shapes, std::vector<DType> dtypes) : s_(std::make_unique<State>()) {
  LOCKSTEP_CHECK(shapes.size() == dtypes.size(), "DeviceUpload: ", shapes.size(), " shapes but ", dtypes.size(),
                 " dtypes");
  s_->shapes = std::move(shapes);  // moved: fit makes one per replica and step
  s_->dtypes = std::move(dtypes);
  s_->reserve_device();
}

void DeviceUpload::reserve(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
  LOCKSTEP_CHECK(shapes.size() == dtypes.size(), "DeviceUpload: ", shapes.size(), " shapes but ", dtypes.size(),
                 " dtypes");
  if (!s_) {
    s_ = std::make_unique<State>();
  } else {
    if (s_->ops) s_->settle();  // (as the destructor: a copy never taken is waited for)
    s_->clear();
  }
  try {
    s_->shapes = shapes;  // copied into the vectors kept: no allocation where they are as large
    s_->dtypes = dtypes;
    s_->reserve_device();
  } catch (...) {
    s_.reset();  // reserved for nothing, as DeviceUpload(): no half-written shapes to start
    throw;
  }
}

DeviceUpload::DeviceUpload(std::vector<Tensor> buffers) : s_(std::make_unique<State>()) {
  const Device here = backend::current_context().device();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const Tensor& t = buffers[i];
    LOCKSTEP_CHECK(t.defined() && t.device() == here, "DeviceUpload: buffer ", i, " is ",
                   t.defined() ? "on " + t.device().str() : std::string("undefined"), " but this thread computes on ",
                   here.str());
    s_->shapes.push_back(t.shape());
    s_->dtypes.push_back(t.dtype());
  }
  s_->tensors = std::move(buffers);
  s_->given = true;
  s_->order_after_queued_work();
}

DeviceUpload::~DeviceUpload() {
  if (s_ && s_->ops) s_->settle();
}
DeviceUpload::DeviceUpload(DeviceUpload&&) noexcept = default;
DeviceUpload& DeviceUpload::operator=(DeviceUpload&& other) noexcept {
  if (this != &other) {
    if (s_ && s_->ops) s_->settle();
    s_ = std::move(other.s_);
  }
  return *this;
}

bool DeviceUpload::started() const { return s_ && s_->started; }

Tensor DeviceUpload::stage(std::size_t i) {
  LOCKSTEP_CHECK(s_ && !s_->started && i < s_->shapes.size(), "DeviceUpload::stage: ",
                 s_ && s_->started ? "started already" : "no tensor " + std::to_string(i));
  if (!s_->staging || !s_->bytes(i)) return {};
  void* host = nullptr;
  if (s_->one_block()) {
    host = static_cast<char*>(s_->batch.host) + s_->offsets[i];
  } else {
    if (s_->staged.size() <= i) s_->staged.resize(s_->shapes.size());
    backend::StagedHost& block = s_->staged[i];
    if (!block.lease) block = s_->staging->acquire(*s_->ctx, s_->bytes(i));
    host = block.host;
  }
  return host ? Tensor::wrap(host, s_->shapes[i], s_->dtypes[i]) : Tensor{};
}

void DeviceUpload::start(const std::vector<Tensor>& host) {
  LOCKSTEP_CHECK(s_ && !s_->started, "DeviceUpload::start: started already");
  LOCKSTEP_CHECK(host.size() == s_->shapes.size(), "DeviceUpload::start: ", host.size(), " tensors for ",
                 s_->shapes.size(), " reserved");
  for (std::size_t i = 0; i < host.size(); ++i) {
    const Tensor& t = host[i];
    LOCKSTEP_CHECK(t.defined() && t.device().kind == DeviceKind::kCpu && t.shape() == s_->shapes[i] &&
                       t.dtype() == s_->dtypes[i],
                   "DeviceUpload::start: tensor ", i, " is ", t.defined() ? t.shape().str() : "undefined", " ",
                   t.defined() ? dtype_name(t.dtype()) : "", " on ", t.defined() ? t.device().str() : "-",
                   ", reserved for ", s_->shapes[i].str(), " ", dtype_name(s_->dtypes[i]), " from the host");
  }
  s_->started = true;
  if (!s_->ops) {
    if (!s_->given) s_->tensors = host;
    for (std::size_t i = 0; s_->given && i < host.size(); ++i) s_->tensors[i].copy_from(host[i]);
    return;
  }
  if (s_->one_block())
    s_->copy_batch(host);
  else
    s_->copy_each(host);
  s_->release_staged();  // blocks the caller did not use
  s_->done = s_->ops->record_fence(*s_->ctx, true);
}

std::vector<Tensor> DeviceUpload::take() {
  LOCKSTEP_CHECK(s_ && s_->started && !s_->taken, "DeviceUpload::take: ",
                 s_ && s_->taken ? "taken already" : "not started");
  LOCKSTEP_CHECK(&backend::current_context() == s_->ctx, "DeviceUpload::take: the upload is for ",
                 s_->ctx->device().str(), " but this thread computes on ", backend::current_context().device().str());
  s_->taken = true;
  if (s_->ops) s_->settle();
  return std::move(s_->tensors);
}

}  // namespace lockstep
