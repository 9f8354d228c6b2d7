#include "lockstep/tensor/kernel_launches.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <utility>

#include "tensor/kernel_launches.hpp"

namespace lockstep::detail {
namespace {
constexpr std::size_t kKernels = static_cast<std::size_t>(backend::KernelOp::kCount);
constexpr int kIndices = 32;  // per device kind; higher indices share the last count
constexpr std::size_t kRows = 2 * kIndices;
using Row = std::array<std::atomic<std::uint64_t>, kKernels>;

// Counts per thread, summed on read: a launch writes its own thread's row alone (no atomic
// read-modify-write, no cache line shared with another replica's thread). Relaxed: a count, read
// by tests and benches once the work they count is done. A thread's counts join `gone` when it
// ends. Never destroyed: a thread may end during exit.
struct Counts {
  std::array<Row, kRows> rows{};
};
std::mutex& g_mu = *new std::mutex;
std::vector<Counts*>& g_live = *new std::vector<Counts*>;
Counts& g_gone = *new Counts;

// The row of `d`'s counts.
std::size_t row_of(const Device& d) {
  const int index = std::clamp(d.index, 0, kIndices - 1);
  return static_cast<std::size_t>((d.kind == DeviceKind::kCpu ? 0 : kIndices) + index);
}

void add(std::atomic<std::uint64_t>& to, std::uint64_t n) { to.store(to.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }

class ThreadCounts {
 public:
  Row& row(const Device& d) {
    if (!counts_) [[unlikely]] {
      counts_ = new Counts;
      const std::lock_guard<std::mutex> lock(g_mu);
      g_live.push_back(counts_);
    }
    return counts_->rows[row_of(d)];
  }
  ~ThreadCounts() {
    if (!counts_) return;
    const std::lock_guard<std::mutex> lock(g_mu);
    for (std::size_t r = 0; r < kRows; ++r)
      for (std::size_t i = 0; i < kKernels; ++i)
        g_gone.rows[r][i].fetch_add(counts_->rows[r][i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    std::erase(g_live, counts_);
    delete counts_;
  }

 private:
  Counts* counts_ = nullptr;
};
thread_local ThreadCounts t_counts;
// Captures are rare (one per signature and graph): one shared count per device row.
std::array<std::atomic<std::uint64_t>, kRows> g_captures{};

thread_local std::vector<std::uint32_t>* t_tally = nullptr;

// Kernel i's count on `d` over every thread, live and gone.
std::uint64_t count(const Device& d, std::size_t i) {
  const std::size_t r = row_of(d);
  const std::lock_guard<std::mutex> lock(g_mu);
  std::uint64_t n = g_gone.rows[r][i].load(std::memory_order_relaxed);
  for (const Counts* c : g_live) n += c->rows[r][i].load(std::memory_order_relaxed);
  return n;
}
}  // namespace

void note_kernel_launch(const Device& device, backend::KernelOp op) {
  const auto i = static_cast<std::size_t>(op);
  add(t_counts.row(device)[i], 1);
  if (t_tally) [[unlikely]]
    ++(*t_tally)[i];
}

LaunchTally::LaunchTally(std::vector<std::uint32_t>& tally) : previous_(t_tally) {
  if (tally.size() < kKernels) tally.resize(kKernels);  // here, not at each launch
  t_tally = &tally;
}
LaunchTally::~LaunchTally() { t_tally = previous_; }

void note_replayed_launches(const Device& device, const std::vector<std::uint32_t>& tally) {
  Row& row = t_counts.row(device);
  for (std::size_t i = 0; i < tally.size() && i < kKernels; ++i)
    if (tally[i]) add(row[i], tally[i]);
}

void note_step_capture(const Device& device) { g_captures[row_of(device)].fetch_add(1, std::memory_order_relaxed); }

std::uint64_t step_captures(const Device& device) { return g_captures[row_of(device)].load(std::memory_order_relaxed); }

std::uint64_t kernel_launches(const Device& device) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < kKernels; ++i) n += count(device, i);
  return n;
}

std::uint64_t kernel_launches(const Device& device, const std::string& kernel) {
  for (std::size_t i = 0; i < kKernels; ++i)
    if (kernel == backend::kernel_op_name(static_cast<backend::KernelOp>(i))) return count(device, i);
  return 0;
}

std::string kernel_launches_by_kernel(const Device& device) {
  std::vector<std::pair<std::uint64_t, std::size_t>> rows;
  for (std::size_t i = 0; i < kKernels; ++i)
    if (const std::uint64_t n = count(device, i)) rows.emplace_back(n, i);
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s;
  for (const auto& [n, i] : rows)
    s += (s.empty() ? "" : ", ") + std::string(backend::kernel_op_name(static_cast<backend::KernelOp>(i))) +
         " " + std::to_string(n);
  return s.empty() ? "none" : s;
}

}  // namespace lockstep::detail
