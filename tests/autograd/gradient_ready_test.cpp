// GradientTape::gradient's on_ready: each source's gradient is handed over once, the moment no
// op left to walk reads the source, and it is the gradient gradient() returns. What lets a
// replica start exchanging the last layer's gradients while the first layers' backward runs.
#include <gtest/gtest.h>

#include <vector>

#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"

using namespace lockstep;

namespace {
struct Net {
  Tensor x = test::random_uniform({4, 5}, 1);
  Variable w1{test::random_uniform({5, 6}, 2)};
  Variable b1{test::random_uniform({6}, 3)};
  Variable w2{test::random_uniform({6, 3}, 4)};
  Variable unused{test::random_uniform({2}, 5)};

  // relu(x w1 + b1) w2, squared and summed, plus a penalty on w1 read after the layers: w1's
  // gradient has two parts, the later one first in the walk.
  Tensor loss() const {
    const Tensor h = relu(add(matmul(x, w1.value()), b1.value()));
    const Tensor y = matmul(h, w2.value());
    return add(sum(mul(y, y)), sum(mul(w1.value(), w1.value())));
  }
  std::vector<Variable> sources() const { return {w1, b1, w2, unused, w1}; }
};
}  // namespace

TEST(GradientReady, EachGradientIsHandedOverOnceWhenFinalInBackwardOrder) {
  Net net;
  std::vector<Tensor> plain;
  {
    GradientTape tape;
    plain = tape.gradient(net.loss(), net.sources());
  }
  std::vector<std::size_t> order;
  std::vector<Tensor> handed(5);
  std::vector<Tensor> got;
  {
    GradientTape tape;
    const Tensor loss = net.loss();
    got = tape.gradient(loss, net.sources(), Tensor(), [&](std::size_t i, const Tensor& g) {
      order.push_back(i);
      handed[i] = g;
    });
  }
  // The source nothing reads first, then w2 (the last layer), b1, and w1 once the first matmul's
  // backward added its part; w1's two indices together, in index order.
  EXPECT_EQ(order, (std::vector<std::size_t>{3, 2, 1, 0, 4}));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_FALSE(handed[3].defined());
  EXPECT_FALSE(got[3].defined());
  for (std::size_t i : {0, 1, 2, 4}) {
    ASSERT_TRUE(handed[i].defined()) << i;
    EXPECT_EQ(handed[i].impl(), got[i].impl()) << "source " << i << ": handed over a gradient that is not the final one";
    EXPECT_TRUE(got[i].bitwise_equal(plain[i])) << "source " << i;
  }
}

TEST(GradientReady, ATargetThatIsASourceIsFinalAtOnce) {
  Variable v{test::random_uniform({3}, 7)};
  GradientTape tape;
  const Tensor t = scale(v.value(), 2.0f);
  std::vector<std::size_t> order;
  const auto got = tape.gradient(t, std::vector<Tensor>{t, v.value()}, Tensor(),
                                 [&](std::size_t i, const Tensor&) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(got[0].to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(got[1].to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

// TF seeds the walk with ones of the target's dtype: the gradient of a 16-bit loss (a custom
// loop under a mixed policy that does not cast its loss up) flows back in 16 bits, not as a
// float32 seed that the 16-bit records refuse.
TEST(GradientTape, ASixteenBitTargetIsSeededInItsOwnDtype) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const Tensor x = cast(test::random_uniform({4, 3}, 8), dtype);
    GradientTape tape;
    tape.watch(x);
    const Tensor loss = sum(scale(x, 3.0f));
    ASSERT_EQ(loss.dtype(), dtype);
    const auto g = tape.gradient(loss, std::vector<Tensor>{x});
    ASSERT_EQ(g[0].dtype(), dtype);
    EXPECT_EQ(cast(g[0], DType::kF32).to_vector<float>(), std::vector<float>(12, 3.0f));
  }
}

// Several targets, each with its own output gradient, in one walk (a model's outputs' losses,
// each seeded where it is): the gradient of the sum of each target times its seed, a target
// without a seed seeded with ones; each source handed over once; counts that differ refused.
TEST(GradientTape, SeveralTargetsGiveTheGradientOfTheirSeededSum) {
  Variable v{Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3})};
  Variable unused{Tensor::from_vector(std::vector<float>{4}, Shape{1})};
  GradientTape tape;
  const std::vector<Tensor> targets{scale(v.value(), 2.0f), scale(v.value(), 3.0f), sum(v.value())};
  const std::vector<Tensor> seeds{Tensor::from_vector(std::vector<float>{1, 10, 100}, Shape{3}),
                                  Tensor::from_vector(std::vector<float>{-1, 0, 1}, Shape{3}), Tensor()};
  std::vector<std::size_t> order;
  const auto got = tape.gradient(targets, std::vector<Variable>{v, unused}, seeds,
                                 [&](std::size_t i, const Tensor&) { order.push_back(i); });
  ASSERT_EQ(got.size(), 2u);
  // 2 * seed0 + 3 * seed1 + 1 (the sum's ones).
  EXPECT_EQ(got[0].to_vector<float>(), (std::vector<float>{0, 21, 204}));
  EXPECT_FALSE(got[1].defined());
  EXPECT_EQ(order, (std::vector<std::size_t>{1, 0}));
}

TEST(GradientTape, SeveralTargetsNeedAnOutputGradientSlotEach) {
  Variable v{Tensor::from_vector(std::vector<float>{1, 2}, Shape{2})};
  GradientTape tape;
  const std::vector<Tensor> targets{scale(v.value(), 2.0f), scale(v.value(), 3.0f)};
  try {
    (void)tape.gradient(targets, std::vector<Variable>{v}, std::vector<Tensor>{Tensor()},
                        GradientTape::GradientReady());
    FAIL() << "two targets walked with one output gradient";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("1 output gradients for 2 targets"), std::string::npos) << e.what();
  }
}
