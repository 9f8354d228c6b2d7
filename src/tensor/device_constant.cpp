#include "lockstep/tensor/device_constant.hpp"

#include <mutex>  // recursive: a builder may use constants of its own
#include <unordered_map>
#include <vector>

#include "backend/context.hpp"
#include "backend/kernels.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/host_reads.hpp"

namespace lockstep {

namespace {
constexpr std::uint64_t kBudget = 64ull << 20;

struct Kept {
  std::unordered_map<std::string, Tensor> tensors;       // by device and key: "gpu:0|RepeatVector rows 4"
  std::unordered_map<std::string, std::uint64_t> bytes;  // by device
  std::vector<Tensor> replaced;                          // by larger builds: graphs may still read them
};

// Never destroyed: a graph held elsewhere may replay until the process ends, and freeing device
// memory while the process exits could fail with the backend already gone.
Kept& kept() {
  static Kept* k = new Kept;
  return *k;
}
std::recursive_mutex& kept_mu() {
  static auto* mu = new std::recursive_mutex;
  return *mu;
}

// `build`'s host values copied to the current context's device (found there by `key`); their
// host bytes kept beside integer ones, so that ops check them as indices on the host
// (checked_labels), not with a device read that would keep a step from being captured.
Tensor build_on_device(const std::string& key, std::int64_t rows,
                       const std::function<Tensor(std::int64_t)>& build) {
  Tensor host;
  if (backend::current_context().device().kind == DeviceKind::kCpu) {
    host = build(rows);
  } else {
    const backend::ContextGuard on_host(backend::default_cpu_context());
    host = build(rows);
  }
  LOCKSTEP_CHECK(
      host.defined() && host.device().kind == DeviceKind::kCpu && host.rank() >= 1 && host.dim(0) == rows,
      "device_constant '", key, "': the builder made ",
      host.defined() ? "a " + host.shape().str() + " tensor on " + host.device().str()
                     : std::string("no tensor"),
      ", not ", rows, " rows in host memory");
  if (backend::current_context().device().kind == DeviceKind::kCpu) return host;
  Tensor t = Tensor::empty(host.shape(), host.dtype());
  t.copy_from(host);
  detail::remember_host_copy(t, host);
  return t;
}

// Waits until the copies that built `t` are done: a stream of the device other than the one they
// were queued on (a logical replica's) may read it next, ordered by nothing else.
void wait_for_build(const Tensor& t) {
  const Device d = t.device();
  if (d.kind == DeviceKind::kCpu || t.nbytes() == 0) return;
  char byte = 0;
  detail::note_host_read(d, detail::HostRead::kCopyToHost);
  backend::device_ops(d.kind).copy_to_host(backend::current_context(), &byte, t.raw_data(), 1);
}
}  // namespace

std::uint64_t device_constant_budget() { return kBudget; }

std::uint64_t device_constant_bytes(const Device& device) {
  std::lock_guard<std::recursive_mutex> lock(kept_mu());
  const auto it = kept().bytes.find(device.str());
  return it == kept().bytes.end() ? 0 : it->second;
}

Tensor device_constant(const std::string& key, std::int64_t rows,
                       const std::function<Tensor(std::int64_t)>& build) {
  LOCKSTEP_CHECK(rows >= 0, "device_constant '", key, "': ", rows, " rows asked for");
  const Device device = backend::current_context().device();
  const std::string name = device.str() + "|" + key;
  std::lock_guard<std::recursive_mutex> lock(kept_mu());
  Kept& k = kept();
  const auto it = k.tensors.find(name);
  if (it != k.tensors.end() && it->second.dim(0) >= rows)
    return it->second.dim(0) == rows ? it->second : it->second.slice(0, rows);
  // Inside a capture the copy would be recorded, and the memory the graph's pool's.
  LOCKSTEP_CHECK(!StepGraph::capturing_here(), "device_constant '", key, "': ", rows, " rows on ",
                 device.str(), " are first asked for inside a capture (",
                 it == k.tensors.end() ? 0 : it->second.dim(0),
                 " kept), which cannot copy them from the host; an eager step of that size builds them");
  Tensor t;
  {
    const StepCaptureCheck::OnThisThread unwatched(nullptr);  // built once: no replay repeats it
    t = build_on_device(key, rows, build);
  }
  std::uint64_t& used = k.bytes[device.str()];
  if (used + t.nbytes() > kBudget) {
    // Past the budget: this call's own copy, which a watching capture check is told of.
    if (StepCaptureCheck* check = current_step_capture_check())
      check->block("a copy of host memory into a " + t.shape().str() + " tensor (the constant '" + key +
                   "', past the 64 MiB kept per device: a replay would copy what that memory holds then)");
    return t;
  }
  wait_for_build(t);
  used += t.nbytes();
  if (it == k.tensors.end()) {
    k.tensors.emplace(name, t);
  } else {
    k.replaced.push_back(it->second);
    it->second = t;
  }
  return t;
}

}  // namespace lockstep
