#include "lockstep/tensor/device_upload.hpp"

#include <string>
#include <utility>

#include "backend/context.hpp"
#include "backend/kernels.hpp"
#include "backend/staged_copy.hpp"
#include "lockstep/core/error.hpp"
#include "tensor/host_copy.hpp"

namespace lockstep {

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
  std::vector<backend::StagedHost> staged;            // blocks lent, by tensor, until start()

  ~State() { release_staged(); }
  void release_staged() noexcept {
    for (backend::StagedHost& b : staged)
      if (b.lease) staging->release(b);
    staged.clear();
  }

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

DeviceUpload::DeviceUpload(std::vector<Shape> shapes, std::vector<DType> dtypes) : s_(std::make_unique<State>()) {
  LOCKSTEP_CHECK(shapes.size() == dtypes.size(), "DeviceUpload: ", shapes.size(), " shapes but ", dtypes.size(),
                 " dtypes");
  s_->shapes = std::move(shapes);  // moved: fit makes one per replica and step
  s_->dtypes = std::move(dtypes);
  if (!s_->order_after_queued_work()) return;
  s_->tensors.reserve(s_->shapes.size());
  for (std::size_t i = 0; i < s_->shapes.size(); ++i) s_->tensors.push_back(Tensor::empty(s_->shapes[i], s_->dtypes[i]));
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
  if (!s_->staging) return {};
  const std::size_t bytes = static_cast<std::size_t>(s_->shapes[i].numel()) * dtype_size(s_->dtypes[i]);
  if (s_->staged.size() <= i) s_->staged.resize(s_->shapes.size());
  backend::StagedHost& block = s_->staged[i];
  if (!block.lease && bytes) block = s_->staging->acquire(*s_->ctx, bytes);
  return block.lease ? Tensor::wrap(block.host, s_->shapes[i], s_->dtypes[i]) : Tensor{};
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
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (!host[i].nbytes()) continue;
    detail::forget_host_copy(s_->tensors[i]);
    void* after = s_->after;
    s_->after = nullptr;  // consumed by the first copy; the copy stream keeps the rest in order
    backend::StagedHost* block = i < s_->staged.size() ? &s_->staged[i] : nullptr;
    if (block && block->lease && host[i].raw_data() == block->host) {  // the caller filled the block
      const backend::StagedHost taken = std::exchange(*block, {});
      s_->staging->copy_beside(*s_->ctx, s_->tensors[i].raw_data(), taken, host[i].nbytes(), after);
      continue;  // (the block is lent again: its bytes are no host copy to keep)
    }
    s_->ops->copy_from_host_beside(*s_->ctx, s_->tensors[i].raw_data(), host[i].raw_data(), host[i].nbytes(), after);
    detail::remember_host_copy(s_->tensors[i], host[i]);  // a batch gathered for this copy
  }
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
