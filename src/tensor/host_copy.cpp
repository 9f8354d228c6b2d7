// Host bytes kept beside device copies of integer batches (tensor/host_copy.hpp).
#include "tensor/host_copy.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lockstep::detail {

namespace {
// Device memory the input path copied whole from the host, and those host bytes. Keyed by the
// device memory's Storage; an entry whose Storage died (the weak pointer) is stale, so an
// address used again is never mistaken for it. Few entries: the batches in flight.
struct HostCopy {
  std::weak_ptr<Storage> device;
  std::shared_ptr<const Storage> host;  // null: the device memory is its own host copy (a CPU tensor's)
  std::size_t offset = 0;
  std::int64_t inside_below = 0;  // > 0: every value of the memory was found inside [0, it)
};
std::mutex g_copies_mu;
std::unordered_map<const Storage*, HostCopy> g_copies;
std::atomic<std::size_t> g_copies_size{0};  // read without the lock: none kept, nothing to look up
std::size_t g_sweep_at = 16;  // the size at which stale entries are swept next (guarded by g_copies_mu)
std::atomic<std::uint64_t> g_scans{0};

// Nodes of entries swept or forgotten, emptied, for the next entries: each step's batch makes
// one (its integer components' new device memory), which would otherwise allocate a node every
// step (issue 37). At most kSpareNodes; guarded by g_copies_mu.
constexpr std::size_t kSpareNodes = 64;
std::vector<decltype(g_copies)::node_type> g_spare;

void keep_spare(decltype(g_copies)::node_type node) {
  if (!node || g_spare.size() >= kSpareNodes) return;
  node.mapped() = {};  // holds no memory alive
  g_spare.push_back(std::move(node));
}

// g_copies[key] = c, in a spare node where the key is new and one is left.
void put(const Storage* key, HostCopy c) {
  if (const auto it = g_copies.find(key); it != g_copies.end()) {
    it->second = std::move(c);
    return;
  }
  if (g_spare.empty()) {
    g_copies.emplace(key, std::move(c));
    return;
  }
  auto node = std::move(g_spare.back());
  g_spare.pop_back();
  node.key() = key;
  node.mapped() = std::move(c);
  g_copies.insert(std::move(node));
}
}  // namespace

void remember_host_copy(const Tensor& device_copy, const Tensor& host) {
  // (Memory the host tensor does not own, Tensor::wrap's, may go away while the copy lives.)
  // A CPU tensor is its own host copy (a kept index constant: remembered for its checks).
  if (is_floating(host.dtype()) || host.device().kind != DeviceKind::kCpu || !host.impl()->storage->allocator ||
      (device_copy.device().kind == DeviceKind::kCpu && device_copy.impl()->storage != host.impl()->storage))
    return;
  const std::shared_ptr<Storage>& s = device_copy.impl()->storage;
  if (device_copy.impl()->offset != 0 || device_copy.nbytes() != s->nbytes || host.nbytes() != s->nbytes) return;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  // Host bytes are kept only while their device copy lives (or until a sweep after it died). The
  // sweep walks every entry: made each time the entries have doubled since the last, it costs
  // each copy O(1) however many device copies are alive (a sweep at every copy cost fit a walk
  // over every batch it kept alive: 16% of its CPU on emulated gpu:0, growing with the steps).
  if (g_copies.size() >= g_sweep_at) {
    for (auto it = g_copies.begin(); it != g_copies.end();) {
      const auto stale = it++;
      if (stale->second.device.expired()) keep_spare(g_copies.extract(stale));
    }
    g_sweep_at = std::max<std::size_t>(16, 2 * g_copies.size());
  }
  // (A CPU tensor is not held by its own entry: that would keep every batch alive for good.)
  const bool own = host.impl()->storage == s;
  put(s.get(), HostCopy{s, own ? nullptr : host.impl()->storage, host.impl()->offset});
  g_copies_size.store(g_copies.size(), std::memory_order_relaxed);
}

std::shared_ptr<const void> host_copy_of(const Tensor& t, std::int64_t* inside_below) {
  if (inside_below) *inside_below = 0;
  if (g_copies_size.load(std::memory_order_relaxed) == 0) return nullptr;
  const std::shared_ptr<Storage>& s = t.impl()->storage;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  const auto it = g_copies.find(s.get());
  if (it == g_copies.end() || it->second.device.lock() != s) return nullptr;
  const HostCopy& c = it->second;
  if (inside_below) *inside_below = c.inside_below;
  const std::shared_ptr<const Storage> host = c.host ? c.host : s;
  return {host, static_cast<const char*>(host->data) + c.offset + t.impl()->offset};  // keeps them alive
}

void share_host_copy(const Tensor& from, const Tensor& to) {
  if (g_copies_size.load(std::memory_order_relaxed) == 0 || !from.defined() || !to.defined()) return;
  const std::shared_ptr<Storage>& f = from.impl()->storage;
  const std::shared_ptr<Storage>& s = to.impl()->storage;
  if (from.impl()->offset != 0 || to.impl()->offset != 0 || from.nbytes() != f->nbytes || to.nbytes() != s->nbytes ||
      f->nbytes != s->nbytes)
    return;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  const auto it = g_copies.find(f.get());
  if (it == g_copies.end() || it->second.device.lock() != f) return;
  HostCopy c = it->second;
  if (!c.host) c.host = f;  // `from` is its own host copy: `to` reads it
  c.device = s;
  put(s.get(), std::move(c));
  g_copies_size.store(g_copies.size(), std::memory_order_relaxed);
}

void note_host_copy_scanned(const Tensor& t, std::int64_t limit, bool inside) {
  g_scans.fetch_add(1, std::memory_order_relaxed);
  const std::shared_ptr<Storage>& s = t.impl()->storage;
  if (!inside || limit <= 0 || t.impl()->offset != 0 || t.nbytes() != s->nbytes) return;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  const auto it = g_copies.find(s.get());
  if (it == g_copies.end() || it->second.device.lock() != s) return;
  std::int64_t& below = it->second.inside_below;
  below = below > 0 ? std::min(below, limit) : limit;
}

std::uint64_t host_copy_scans() { return g_scans.load(std::memory_order_relaxed); }

void forget_host_copy(const Tensor& t) {
  // Only integer memory has host bytes: a float write (a gradient's fill, a copy into a bucket)
  // takes no lock.
  if (g_copies_size.load(std::memory_order_relaxed) == 0 || !t.defined() || is_floating(t.dtype())) return;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  keep_spare(g_copies.extract(t.impl()->storage.get()));
  g_copies_size.store(g_copies.size(), std::memory_order_relaxed);
}

}  // namespace lockstep::detail
