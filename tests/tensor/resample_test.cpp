// The resample op's own contract (ops_resample.hpp): the gradient's transposed taps, sizes past
// any image refused as a ResourceError, and bad tables refused by name. Its values: the parity
// rows (tests/backend) and the gradcheck row (tests/autograd).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/tensor/ops_resample.hpp"

using namespace lockstep;

namespace {
// 3 outputs of 2 taps over 4 inputs: output 0 reads inputs 0 and 1, output 1 input 1 alone (its
// second tap padding), output 2 inputs 3 and 1; nothing reads input 2.
const HostTaps kTaps{.taps = 2, .index = {0, 1, 1, 0, 3, 1}, .weight = {0.25f, 0.75f, 1.0f, 0.0f, 0.5f, 2.0f}};

ResampleTaps on_host(const HostTaps& t) {
  const Shape s{static_cast<std::int64_t>(t.index.size()) / t.taps, t.taps};
  return {Tensor::from_vector(t.index, s), Tensor::from_vector(t.weight, s)};
}
}  // namespace

TEST(Resample, TheTransposedTapsListTheOutputsThatReadEachInputInOrder) {
  const HostTaps t = transposed_taps(kTaps, 4);
  ASSERT_EQ(t.taps, 3);  // input 1: outputs 0, 1 and 2
  EXPECT_EQ(t.index, (std::vector<std::int64_t>{0, 0, 0, 0, 1, 2, 0, 0, 0, 2, 0, 0}));
  EXPECT_EQ(t.weight, (std::vector<float>{0.25f, 0, 0, 0.75f, 1.0f, 2.0f, 0, 0, 0, 0.5f, 0, 0}));
}

TEST(Resample, TablesPastHostMemoryAreAResourceErrorAndBadOnesAValueError) {
  EXPECT_THROW(transposed_taps(kTaps, std::int64_t{1} << 62), ResourceError);
  EXPECT_VALUE_ERROR(transposed_taps(kTaps, 3), "index 3 at entry 4 is outside [0, 3)");
  const Tensor x = Tensor::zeros(Shape{2, 3, 5}, DType::kF32);  // 3 inputs: index 3 is outside
  EXPECT_VALUE_ERROR(resample_taps(x, on_host(kTaps)), "resample");
  EXPECT_VALUE_ERROR(resample_taps(Tensor::zeros(Shape{2, 4}, DType::kF32), on_host(kTaps)),
                     "resample: x must be (rows, in, inner), got (2, 4)");
  const Tensor y = resample_taps(Tensor::zeros(Shape{2, 4, 5}, DType::kF32), on_host(kTaps));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
}
