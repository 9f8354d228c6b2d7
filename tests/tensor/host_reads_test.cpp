// The count of host reads (lockstep/tensor/host_reads.hpp) is of device memory only: reading a
// CPU device's tensors, host memory, counts nothing. (What counts on GPUs: tests/gpu.)
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "lockstep/tensor/host_reads.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/tensor.hpp"

using namespace lockstep;

TEST(HostReads, ReadingHostMemoryCountsNothing) {
  const std::uint64_t before = detail::host_reads();
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(t.slice(1, 2).item(), 2.0f);
  EXPECT_TRUE(t.bitwise_equal(t.clone()));
  EXPECT_EQ(sum_squares(t), 14.0);  // a kernel that returns its result to the host
  const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 2, 1}, {3});
  EXPECT_EQ(one_hot(labels, 3).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 1, 0}));  // first_outside
  EXPECT_EQ(detail::host_reads(), before) << detail::host_reads_by_cause();
}
