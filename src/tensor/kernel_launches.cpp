#include "lockstep/tensor/kernel_launches.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <utility>

#include "tensor/kernel_launches.hpp"

namespace lockstep::detail {
namespace {
constexpr std::size_t kKernels = static_cast<std::size_t>(backend::KernelOp::kCount);
constexpr int kIndices = 32;  // per device kind; higher indices share the last count
// Relaxed: a count, read by tests and benches once the work they count is done.
std::array<std::array<std::atomic<std::uint64_t>, kKernels>, 2 * kIndices> g_counts{};
thread_local std::vector<std::uint32_t>* t_tally = nullptr;

std::array<std::atomic<std::uint64_t>, kKernels>& counts(const Device& d) {
  const int index = std::clamp(d.index, 0, kIndices - 1);
  return g_counts[static_cast<std::size_t>((d.kind == DeviceKind::kCpu ? 0 : kIndices) + index)];
}
}  // namespace

void note_kernel_launch(const Device& device, backend::KernelOp op) {
  const auto i = static_cast<std::size_t>(op);
  counts(device)[i].fetch_add(1, std::memory_order_relaxed);
  if (t_tally) [[unlikely]] {
    t_tally->resize(kKernels);
    ++(*t_tally)[i];
  }
}

LaunchTally::LaunchTally(std::vector<std::uint32_t>& tally) : previous_(t_tally) { t_tally = &tally; }
LaunchTally::~LaunchTally() { t_tally = previous_; }

void note_replayed_launches(const Device& device, const std::vector<std::uint32_t>& tally) {
  auto& c = counts(device);
  for (std::size_t i = 0; i < tally.size() && i < kKernels; ++i)
    if (tally[i]) c[i].fetch_add(tally[i], std::memory_order_relaxed);
}

std::uint64_t kernel_launches(const Device& device) {
  std::uint64_t n = 0;
  for (const auto& c : counts(device)) n += c.load(std::memory_order_relaxed);
  return n;
}

std::uint64_t kernel_launches(const Device& device, const std::string& kernel) {
  const auto& c = counts(device);
  for (std::size_t i = 0; i < kKernels; ++i)
    if (kernel == backend::kernel_op_name(static_cast<backend::KernelOp>(i)))
      return c[i].load(std::memory_order_relaxed);
  return 0;
}

std::string kernel_launches_by_kernel(const Device& device) {
  std::vector<std::pair<std::uint64_t, std::size_t>> rows;
  const auto& c = counts(device);
  for (std::size_t i = 0; i < kKernels; ++i)
    if (const std::uint64_t n = c[i].load(std::memory_order_relaxed)) rows.emplace_back(n, i);
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s;
  for (const auto& [n, i] : rows)
    s += (s.empty() ? "" : ", ") + std::string(backend::kernel_op_name(static_cast<backend::KernelOp>(i))) +
         " " + std::to_string(n);
  return s.empty() ? "none" : s;
}

}  // namespace lockstep::detail
