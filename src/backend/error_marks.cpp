// Device-side error marks: one per device context, in memory the device writes and the host
// reads (error_marks.hpp).
#include "backend/error_marks.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "backend/context.hpp"
#include "backend/devices.hpp"

namespace lockstep::backend {

namespace {
struct Slot {
  const ComputeContext* owner = nullptr;  // null: free for another context of `kind`, unless retired
  DeviceKind kind = DeviceKind::kCpu;
  ErrorMark* mark = nullptr;  // never freed: a graph captured with it may write it until it dies
  bool retired = false;       // its last owner's work may still write it: never handed out again
};
std::mutex g_mu;
// Never destroyed (nor the marks they point to): a graph captured with a mark may write it until
// the process ends, and a context destroyed during exit still releases its mark here.
std::vector<Slot>& g_slots = *new std::vector<Slot>;
std::atomic<std::size_t> g_owned{0};  // read without the lock: no mark, nothing to look at

// Sites: appended under the lock, read without it (a name's pointer is published before the
// count that covers it). Each entry maps a name's address to its site: one name may come from
// several addresses (the same literal in two files), each compared once by its characters.
constexpr std::size_t kSites = 256;  // past it every new name is "a device check"
struct Site {
  std::atomic<const char*> name{nullptr};
  std::int64_t site = 0;
};
std::array<Site, kSites> g_site_ids{};
std::array<const char*, kSites> g_site_names{};
std::atomic<std::size_t> g_site_ids_used{0};
std::size_t g_site_names_used = 0;  // under g_mu
std::atomic<std::size_t> g_site_names_published{0};

std::atomic_ref<std::uint32_t> set_of(ErrorMark* m) { return std::atomic_ref<std::uint32_t>(m->set); }

ErrorMark* new_mark(DeviceKind kind) {
  const DeviceOps& ops = device_ops(kind);
  void* p = ops.alloc_host_mapped ? ops.alloc_host_mapped(sizeof(ErrorMark)) : ::operator new(sizeof(ErrorMark));
  return new (p) ErrorMark{};
}

std::int64_t new_site(const char* what) {
  std::lock_guard<std::mutex> lock(g_mu);
  const std::size_t ids = g_site_ids_used.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < ids; ++i)
    if (g_site_ids[i].name.load(std::memory_order_relaxed) == what) return g_site_ids[i].site;
  if (ids == kSites) return -1;
  std::int64_t site = -1;
  for (std::size_t i = 0; i < g_site_names_used && site < 0; ++i)
    if (std::strcmp(g_site_names[i], what) == 0) site = static_cast<std::int64_t>(i);
  if (site < 0) {
    site = static_cast<std::int64_t>(g_site_names_used);
    g_site_names[g_site_names_used++] = what;
    g_site_names_published.store(g_site_names_used, std::memory_order_release);
  }
  g_site_ids[ids].site = site;
  g_site_ids[ids].name.store(what, std::memory_order_relaxed);
  g_site_ids_used.store(ids + 1, std::memory_order_release);
  return site;
}
}  // namespace

ErrorMark* error_mark(ComputeContext& ctx) {
  if (ErrorMark* m = ctx.error_mark()) [[likely]] return m;
  std::lock_guard<std::mutex> lock(g_mu);
  Slot* spare = nullptr;
  for (Slot& s : g_slots)
    if (!s.owner && !s.retired && s.kind == ctx.device().kind && !spare) spare = &s;
  if (!spare) spare = &g_slots.emplace_back(Slot{nullptr, ctx.device().kind, new_mark(ctx.device().kind)});
  spare->owner = &ctx;
  g_owned.fetch_add(1, std::memory_order_relaxed);
  ctx.set_error_mark(spare->mark);
  return spare->mark;
}

std::int64_t error_site(const char* what) {
  const std::size_t ids = g_site_ids_used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < ids; ++i)
    if (g_site_ids[i].name.load(std::memory_order_relaxed) == what) return g_site_ids[i].site;
  return new_site(what);
}

const char* error_site_name(std::int64_t site) {
  return site >= 0 && static_cast<std::size_t>(site) < g_site_names_published.load(std::memory_order_acquire)
             ? g_site_names[static_cast<std::size_t>(site)]
             : "a device check";
}

std::string outside_message(const char* what, std::int64_t value, std::int64_t index, std::int64_t limit) {
  return std::string(what) + ": label " + std::to_string(value) + " at index " + std::to_string(index) +
         " is outside [0, " + std::to_string(limit) + ")";
}

std::optional<TakenMarks> take_error_marks(const ComputeContext& reader) {
  if (g_owned.load(std::memory_order_relaxed) == 0) return std::nullopt;
  const bool own = reader.own_marks();
  std::optional<TakenMarks> taken;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots) {
    if (!s.owner || (own ? s.owner != &reader : s.owner->own_marks())) continue;
    if (set_of(s.mark).load(std::memory_order_acquire) == 0) continue;
    if (taken) ++taken->more;
    else taken = TakenMarks{*s.mark};  // written before `set`, which the device writes last
    set_of(s.mark).store(0, std::memory_order_release);  // the device writes a set mark no more
  }
  return taken;
}

void release_error_mark(ComputeContext& ctx) {
  if (!ctx.error_mark()) return;
  // Before the lock: the wait may be long, and other contexts take and read their marks meanwhile.
  bool done = false;
  try {
    done = device_kind(ctx.device().kind).wait_for_queue(ctx);
  } catch (...) {  // a destructor's call: the slot is retired instead
  }
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots) {
    if (s.owner != &ctx) continue;
    s.retired = !done;
    if (set_of(s.mark).load(std::memory_order_acquire) != 0) {
      const ErrorMark& m = *s.mark;
      std::fprintf(stderr, "WARNING: a context of %s was destroyed with an error no read raised: %s\n",
                   ctx.device().str().c_str(),
                   outside_message(error_site_name(m.site), m.value, m.index, m.limit).c_str());
    }
    s.owner = nullptr;
    set_of(s.mark).store(0, std::memory_order_release);
    g_owned.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

}  // namespace lockstep::backend
