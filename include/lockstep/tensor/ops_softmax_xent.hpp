#pragma once
// A softmax output layer's softmax and its sparse cross-entropy in one kernel: what the train and
// test steps run where the loss takes the output layer's logits (losses' per_example_and_softmax).
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// softmax(logits) and sparse_softmax_cross_entropy_with_logits(labels, logits) in one kernel,
/// recorded as those two ops: the bits of each, the same checks and errors as the loss's.
struct LossAndSoftmax {
  Tensor loss;
  Tensor softmax;
};
LossAndSoftmax sparse_softmax_cross_entropy_and_softmax(const Tensor& labels, const Tensor& logits);

}  // namespace lockstep
