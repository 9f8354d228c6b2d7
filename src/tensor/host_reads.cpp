#include "lockstep/tensor/host_reads.hpp"

#include <array>
#include <atomic>
#include <cstddef>

#include "backend/capture.hpp"
#include "tensor/host_reads.hpp"

namespace lockstep::detail {
namespace {
constexpr std::size_t kKernels = static_cast<std::size_t>(backend::KernelOp::kCount);
constexpr std::size_t kCopy = kKernels, kEqual = kKernels + 1, kBetween = kKernels + 2, kCauses = kKernels + 3;
// Relaxed: a count, read by tests once the work they count is done.
std::array<std::atomic<std::uint64_t>, kCauses> g_counts{};

void add(std::size_t cause) { g_counts[cause].fetch_add(1, std::memory_order_relaxed); }
}  // namespace

void note_host_read(const Device& device, HostRead what) {
  if (device.kind == DeviceKind::kCpu) return;
  add(what == HostRead::kCopyToHost ? kCopy : what == HostRead::kBitwiseEqual ? kEqual : kBetween);
}

void note_kernel_host_read(const Device& device, backend::KernelOp op) {
  if (device.kind != DeviceKind::kCpu && backend::kernel_returns_to_host(op)) add(static_cast<std::size_t>(op));
}

std::uint64_t host_reads() {
  std::uint64_t n = 0;
  for (const auto& c : g_counts) n += c.load(std::memory_order_relaxed);
  return n;
}

namespace {
std::string cause_name(std::size_t i) {
  return i == kCopy      ? "copy to the host"
         : i == kEqual   ? "bitwise_equal"
         : i == kBetween ? "copy between devices"
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
