// Device-side error marks: one per device context, in memory the device writes and the host
// reads (error_marks.hpp).
#include "backend/error_marks.hpp"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "backend/devices.hpp"

namespace lockstep::backend {

namespace {
struct Slot {
  const ComputeContext* owner = nullptr;  // null: free for another context of `kind`
  DeviceKind kind = DeviceKind::kCpu;
  ErrorMark* mark = nullptr;  // never freed: a graph captured with it may write it until it dies
};
std::mutex g_mu;
// Never destroyed (nor the marks they point to): a graph captured with a mark may write it until
// the process ends, and a context destroyed during exit still releases its mark here.
std::vector<Slot>& g_slots = *new std::vector<Slot>;
std::atomic<std::size_t> g_owned{0};  // read without the lock: no mark, nothing to look at
std::vector<const char*> g_sites;

std::atomic_ref<std::uint32_t> set_of(ErrorMark* m) { return std::atomic_ref<std::uint32_t>(m->set); }

ErrorMark* new_mark(DeviceKind kind) {
  const DeviceOps& ops = device_ops(kind);
  void* p = ops.alloc_host_mapped ? ops.alloc_host_mapped(sizeof(ErrorMark)) : ::operator new(sizeof(ErrorMark));
  return new (p) ErrorMark{};
}
}  // namespace

ErrorMark* error_mark(ComputeContext& ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  Slot* spare = nullptr;
  for (Slot& s : g_slots) {
    if (s.owner == &ctx) return s.mark;
    if (!s.owner && s.kind == ctx.device().kind && !spare) spare = &s;
  }
  if (!spare) spare = &g_slots.emplace_back(Slot{nullptr, ctx.device().kind, new_mark(ctx.device().kind)});
  spare->owner = &ctx;
  g_owned.fetch_add(1, std::memory_order_relaxed);
  return spare->mark;
}

std::int64_t error_site(const char* what) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (std::size_t i = 0; i < g_sites.size(); ++i)
    if (std::strcmp(g_sites[i], what) == 0) return static_cast<std::int64_t>(i);
  g_sites.push_back(what);
  return static_cast<std::int64_t>(g_sites.size() - 1);
}

const char* error_site_name(std::int64_t site) {
  std::lock_guard<std::mutex> lock(g_mu);
  return site >= 0 && static_cast<std::size_t>(site) < g_sites.size() ? g_sites[static_cast<std::size_t>(site)]
                                                                        : "a device check";
}

std::optional<ErrorMark> take_error_mark() {
  if (g_owned.load(std::memory_order_relaxed) == 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots) {
    if (!s.owner || set_of(s.mark).load(std::memory_order_acquire) == 0) continue;
    ErrorMark taken = *s.mark;  // written before `set`, which the device writes last
    set_of(s.mark).store(0, std::memory_order_release);  // the device writes a set mark no more
    return taken;
  }
  return std::nullopt;
}

void release_error_mark(const ComputeContext& ctx) {
  if (g_owned.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots) {
    if (s.owner != &ctx) continue;
    s.owner = nullptr;
    set_of(s.mark).store(0, std::memory_order_release);
    g_owned.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

}  // namespace lockstep::backend
