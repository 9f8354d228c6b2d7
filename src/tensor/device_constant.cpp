#include "lockstep/tensor/device_constant.hpp"

#include <cstring>
#include <new>
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
  std::unordered_map<std::string, Tensor> tensors;       // by device and key: "gpu:0|RepeatVector rows: n (4)"
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

// What this thread was handed, by key (its `what` by address), device and rows: found again
// without the lock or a string. Only kept constants, which live for the process.
struct Handed {
  const char* what;
  std::array<std::int64_t, ConstantKey::kParams> params;
  std::size_t count;
  Device device;
  std::int64_t rows;
  bool operator==(const Handed& o) const {
    return what == o.what && params == o.params && count == o.count && device == o.device && rows == o.rows;
  }
};
struct HandedHash {
  std::size_t operator()(const Handed& h) const {
    std::size_t s = std::hash<const void*>()(h.what) ^ (static_cast<std::size_t>(h.rows) * 0x9e3779b97f4a7c15ull) ^ h.count;
    for (std::int64_t p : h.params) s = (s ^ static_cast<std::size_t>(p)) * 0x100000001b3ull;
    return s ^ (static_cast<std::size_t>(h.device.kind) << 8) ^ static_cast<std::size_t>(h.device.index);
  }
};
thread_local std::unordered_map<Handed, Tensor, HandedHash> t_handed;

// `build`'s host values copied to the current context's device (found there by `key`); their
// host bytes kept beside integer ones, so that ops check them as indices on the host
// (checked_labels), not with a device read that would keep a step from being captured.
// The builder's host values; host memory running out (an UpSampling2D of a huge size asks for more
// index rows than memory holds) is a ResourceError naming the constant, not a bare bad_alloc.
Tensor build_on_host(const std::string& key, std::int64_t rows, const ConstantBuilder& build) {
  try {
    return build(rows);
  } catch (const std::bad_alloc&) {
    throw ResourceError(detail::concat("device_constant '", key, "': host memory ran out building it for ", rows,
                                       " row(s): the sizes in its name ask for more than the host holds"));
  }
}

Tensor build_on_device(const std::string& key, std::int64_t rows, ConstantBuilder build) {
  Tensor host;
  if (backend::current_context().device().kind == DeviceKind::kCpu) {
    host = build_on_host(key, rows, build);
  } else {
    const backend::ContextGuard on_host(backend::default_cpu_context());
    host = build_on_host(key, rows, build);
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

namespace {
// The kept constant (made here on the first call that asks for more rows than are kept), under
// the lock; a constant past the budget is this call's own and not kept (`kept` false).
Tensor find_or_build(const ConstantKey& ckey, const Device& device, std::int64_t rows, ConstantBuilder build,
                     bool& is_kept) {
  const std::string key = ckey.str();
  const std::string name = device.str() + "|" + key;
  std::lock_guard<std::recursive_mutex> lock(kept_mu());
  Kept& k = kept();
  const auto it = k.tensors.find(name);
  is_kept = true;
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
    is_kept = false;
    return t;
  }
  wait_for_build(t);
  if (device.kind == DeviceKind::kCpu) detail::remember_host_copy(t, t);  // checked once as indices, as a device's
  used += t.nbytes();
  if (it == k.tensors.end()) {
    k.tensors.emplace(name, t);
  } else {
    k.replaced.push_back(it->second);
    it->second = t;
  }
  return t;
}
}  // namespace

ConstantKey::ConstantKey(const char* what_, std::initializer_list<std::int64_t> params_) : what(what_) {
  LOCKSTEP_CHECK(what_ != nullptr && params_.size() <= kParams, "ConstantKey: a name and at most ", kParams,
                 " parameters, got ", params_.size());
  for (std::int64_t p : params_) params[count++] = p;
}

std::string ConstantKey::str() const {
  std::string s = what;
  for (std::size_t i = 0; i < count; ++i) s += (i ? ", " : " (") + std::to_string(params[i]);
  return count ? s + ")" : s;
}

Tensor device_constant(const ConstantKey& key, std::int64_t rows, ConstantBuilder build) {
  LOCKSTEP_CHECK(rows >= 0, "device_constant '", key.str(), "': ", rows, " rows asked for");
  const Device device = backend::current_context().device();
  const Handed handed{key.what, key.params, key.count, device, rows};
  if (const auto it = t_handed.find(handed); it != t_handed.end()) return it->second;
  bool is_kept = false;
  Tensor t = find_or_build(key, device, rows, build, is_kept);
  if (is_kept) t_handed.emplace(handed, t);
  return t;
}

}  // namespace lockstep
