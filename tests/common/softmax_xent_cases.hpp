#pragma once
// A softmax output layer's softmax and its sparse cross-entropy in one kernel
// (sparse_softmax_cross_entropy_and_softmax) against the two ops it replaced in the train step:
// the softmax's bits, the loss's bits, the logits' gradient through each, and one kernel. On `device`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_softmax_xent.hpp"

namespace lockstep::test {

inline void expect_softmax_xent_as_composed(const Device& device) {
  for (const Shape& shape : {Shape{64, 10}, Shape{7, 37}, Shape{3, 1}, Shape{0, 5}}) {
    const std::int64_t rows = shape[0], cols = shape[1];
    std::vector<float> xs(static_cast<std::size_t>(shape.numel())), gs(static_cast<std::size_t>(rows));
    std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i) * 1.7f) * 9.0f;
    if (xs.size() > 12) xs[12] = 80.0f;  // one class far above its row's others: probabilities of 0
    for (std::int64_t r = 0; r < rows; ++r) {
      labels[static_cast<std::size_t>(r)] = (r * 5 + 2) % cols;
      gs[static_cast<std::size_t>(r)] = 0.25f + static_cast<float>(r % 3);
    }
    const Tensor x = Tensor::from_vector(xs, shape).to(device);
    const Tensor y = Tensor::from_vector(labels, {rows}).to(device);
    const Tensor g = Tensor::from_vector(gs, {rows}).to(device);
    const Tensor gp = mul(x, x);  // an upstream gradient for the softmax output
    const auto gradient = [&](bool fused, bool through_loss) {
      GradientTape tape;
      tape.watch(x);
      Tensor loss, probs;
      if (fused) {
        LossAndSoftmax both = sparse_softmax_cross_entropy_and_softmax(y, x);
        loss = both.loss;
        probs = both.softmax;
      } else {
        probs = softmax(x);
        loss = sparse_softmax_cross_entropy_with_logits(y, x);
      }
      return std::vector<Tensor>{loss, probs,
                                 through_loss ? tape.gradient(loss, std::vector<Tensor>{x}, g)[0]
                                              : tape.gradient(probs, std::vector<Tensor>{x}, gp)[0]};
    };
    const std::string at = shape.str();
    const auto fused = gradient(true, true), composed = gradient(false, true);
    EXPECT_TRUE(fused[0].bitwise_equal(composed[0])) << "loss " << at;
    EXPECT_TRUE(fused[1].bitwise_equal(composed[1])) << "softmax " << at;
    EXPECT_TRUE(fused[2].bitwise_equal(composed[2])) << "gradient through the loss " << at;
    EXPECT_TRUE(gradient(true, false)[2].bitwise_equal(gradient(false, false)[2])) << "through the softmax " << at;
    // The labels' range check aside, one kernel.
    const auto launches = [&device] {
      return std::vector<std::uint64_t>{detail::kernel_launches(device, "softmax_sparse_xent"),
                                        detail::kernel_launches(device, "softmax") +
                                            detail::kernel_launches(device, "sparse_softmax_xent")};
    };
    const std::vector<std::uint64_t> before = launches();
    const LossAndSoftmax untaped = sparse_softmax_cross_entropy_and_softmax(y, x);
    EXPECT_EQ(launches()[0] - before[0], 1u) << "the softmax and the loss: one kernel " << at;
    EXPECT_EQ(launches()[1], before[1]) << at;
    EXPECT_TRUE(untaped.loss.bitwise_equal(composed[0])) << "untaped " << at;
    EXPECT_TRUE(untaped.softmax.bitwise_equal(composed[1])) << "untaped " << at;
  }
  // Labels checked as the loss checks them.
  const Tensor x = Tensor::ones({2, 3}).to(device);
  EXPECT_THROW((void)sparse_softmax_cross_entropy_and_softmax(Tensor::from_vector(std::vector<std::int64_t>{0}, {1}), x),
               ValueError);
}

}  // namespace lockstep::test
