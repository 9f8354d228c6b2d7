#include "lockstep/tensor/host_reads.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/capture.hpp"
#include "tensor/host_reads.hpp"

namespace lockstep::detail {
namespace {
constexpr std::size_t kKernels = static_cast<std::size_t>(backend::KernelOp::kCount);
constexpr std::size_t kCopy = kKernels, kEqual = kKernels + 1, kCauses = kKernels + 2;
// Relaxed: a count, read by tests once the work they count is done.
std::array<std::atomic<std::uint64_t>, kCauses> g_counts{};

void add(std::size_t cause) { g_counts[cause].fetch_add(1, std::memory_order_relaxed); }
}  // namespace

void note_host_read(const Device& device, HostRead what) {
  if (device.kind == DeviceKind::kCpu) return;
  add(what == HostRead::kCopyToHost ? kCopy : kEqual);
}

void note_kernel_host_read(const Device& device, backend::KernelOp op) {
  if (device.kind != DeviceKind::kCpu && backend::kernel_returns_to_host(op)) add(static_cast<std::size_t>(op));
}

namespace {
// Device memory the input path copied whole from the host, and those host bytes. Keyed by the
// device memory's Storage; an entry whose Storage died (the weak pointer) is stale, so an
// address used again is never mistaken for it. Few entries: the batches in flight.
struct HostCopy {
  std::weak_ptr<Storage> device;
  std::shared_ptr<const Storage> host;
  std::size_t offset = 0;
};
std::mutex g_copies_mu;
std::unordered_map<const Storage*, HostCopy> g_copies;
std::atomic<std::size_t> g_copies_size{0};  // read without the lock: none kept, nothing to look up
}  // namespace

void remember_host_copy(const Tensor& device_copy, const Tensor& host) {
  if (is_floating(host.dtype()) || host.device().kind != DeviceKind::kCpu ||
      device_copy.device().kind == DeviceKind::kCpu)
    return;
  const std::shared_ptr<Storage>& s = device_copy.impl()->storage;
  if (device_copy.impl()->offset != 0 || device_copy.nbytes() != s->nbytes || host.nbytes() != s->nbytes) return;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  // Host bytes are kept only while their device copy lives (or until the next copy after it died).
  std::erase_if(g_copies, [](const auto& e) { return e.second.device.expired(); });
  g_copies[s.get()] = HostCopy{s, host.impl()->storage, host.impl()->offset};
  g_copies_size.store(g_copies.size(), std::memory_order_relaxed);
}

const void* host_copy_of(const Tensor& t) {
  if (g_copies_size.load(std::memory_order_relaxed) == 0) return nullptr;
  const std::shared_ptr<Storage>& s = t.impl()->storage;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  const auto it = g_copies.find(s.get());
  if (it == g_copies.end() || it->second.device.lock() != s) return nullptr;
  return static_cast<const char*>(it->second.host->data) + it->second.offset + t.impl()->offset;
}

void forget_host_copy(const Tensor& t) {
  if (g_copies_size.load(std::memory_order_relaxed) == 0 || !t.defined()) return;
  std::lock_guard<std::mutex> lock(g_copies_mu);
  g_copies.erase(t.impl()->storage.get());
  g_copies_size.store(g_copies.size(), std::memory_order_relaxed);
}

std::uint64_t host_reads() {
  std::uint64_t n = 0;
  for (const auto& c : g_counts) n += c.load(std::memory_order_relaxed);
  return n;
}

namespace {
std::string cause_name(std::size_t i) {
  return i == kCopy    ? "copy to the host"
         : i == kEqual ? "bitwise_equal"
                       : std::string("kernel ") + backend::kernel_op_name(static_cast<backend::KernelOp>(i));
}
}  // namespace

std::uint64_t host_reads(const std::string& cause) {
  for (std::size_t i = 0; i < kCauses; ++i)
    if (cause_name(i) == cause) return g_counts[i].load(std::memory_order_relaxed);
  return 0;
}

std::string host_reads_by_cause() {
  std::string s;
  for (std::size_t i = 0; i < kCauses; ++i) {
    const std::uint64_t n = g_counts[i].load(std::memory_order_relaxed);
    if (n) s += (s.empty() ? "" : ", ") + cause_name(i) + " " + std::to_string(n);
  }
  return s.empty() ? "none" : s;
}

}  // namespace lockstep::detail
