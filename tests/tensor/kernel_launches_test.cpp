// The count of kernel launches (lockstep/tensor/kernel_launches.hpp): each kernel an op runs
// counts once on its device, by its op-list name. (Captured steps' replays: tests/gpu.)
#include "lockstep/tensor/kernel_launches.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/tensor.hpp"

using namespace lockstep;
using detail::kernel_launches;

TEST(KernelLaunches, EachKernelCountsOnceOnItsDeviceByName) {
  const Device cpu{};
  const Tensor a = Tensor::from_vector(std::vector<float>{1, -2, 3}, {3});
  const std::uint64_t all = kernel_launches(cpu), binary = kernel_launches(cpu, "binary"),
                      unary = kernel_launches(cpu, "unary");
  const Tensor r = relu(add(a, a));
  EXPECT_EQ(kernel_launches(cpu, "binary"), binary + 1);
  EXPECT_EQ(kernel_launches(cpu, "unary"), unary + 1);
  EXPECT_EQ(kernel_launches(cpu), all + 2) << detail::kernel_launches_by_kernel(cpu);
  EXPECT_EQ(kernel_launches(Device{DeviceKind::kCpu, 7}), 0u);  // no kernel ran there
  EXPECT_EQ(kernel_launches(cpu, "no such kernel"), 0u);
  EXPECT_NE(detail::kernel_launches_by_kernel(cpu).find("binary "), std::string::npos);
  EXPECT_EQ(detail::kernel_launches_by_kernel(Device{DeviceKind::kCpu, 7}), "none");
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{2, 0, 6}));
}

// Counted by each thread apart and summed when read: every thread's launches count, while it runs
// and after it ended.
TEST(KernelLaunches, EveryThreadsLaunchesCountWhileItRunsAndAfterItEnded) {
  const Device cpu{};
  constexpr int kThreads = 4, kOps = 25;
  const std::uint64_t before = kernel_launches(cpu, "binary");
  std::atomic<int> done{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, {2});
      for (int i = 0; i < kOps; ++i) a = add(a, a);
      done.fetch_add(1);
      while (!release.load()) std::this_thread::yield();
    });
  while (done.load() < kThreads) std::this_thread::yield();
  EXPECT_EQ(kernel_launches(cpu, "binary"), before + kThreads * kOps) << "the running threads' counts";
  release.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(kernel_launches(cpu, "binary"), before + kThreads * kOps) << "the ended threads' counts";
}
