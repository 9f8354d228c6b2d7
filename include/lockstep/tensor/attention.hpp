#pragma once
// Scaled dot-product attention: the fused op (flash-attention style) and its unfused
// composition of ops, the reference it is tested against and the path that returns the
// attention probabilities.
#include <array>
#include <optional>

#include "lockstep/tensor/ops.hpp"

namespace lockstep {

struct AttentionOptions {
  /// Key j is masked for query i when j > i (Keras' use_causal_mask).
  bool causal = false;
  /// Dropout on the attention probabilities; unit (head, query i, key j) of an example is
  /// dropout's unit (head * tq + i) * tk + j: dropout of the [b, h, tq, tk] probabilities.
  float dropout_rate = 0.0f;
  DropoutKey dropout_key;
  /// Multiplies q before the product; nullopt: 1 / sqrt(d).
  std::optional<float> scale;
  /// q, k, v and the output (and their gradients) are [b, t, h, d] rather than [b, h, t, d]:
  /// Keras' MultiHeadAttention layout, a projection's output reshaped, no transpose either way.
  bool heads_last = false;
};

/// softmax(scale q k^T, masked) [dropout] @ v, per batch entry and head: q [b, h, tq, d],
/// k [b, h, tk, d], v [b, h, tk, dv] -> [b, h, tq, dv]. mask (uint8, 1 = attend; undefined: none)
/// is [b, tk], [b, 1, tk] or [b, tq, tk] (a batch dim of 1 broadcasts). Masked scores are -1e9,
/// Keras' rule: a row with nothing to attend to averages every value. Fused (flash-attention
/// style): memory linear in the sequence length, no [tq, tk] matrix, forward or backward.
/// *lse, when lse is not null, gets each query row's log-sum-exp of its scores (float32
/// [b, h, tq]: what the gradient recomputes the probabilities from; +inf for a row with
/// nothing to attend to).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = {}, const AttentionOptions& options = {},
                                    Tensor* lse = nullptr);

/// {dq, dk, dv} of scaled_dot_product_attention given its inputs, its output, the row
/// log-sum-exps it gave (float32 [b, h, tq]) and dy.
std::array<Tensor, 3> scaled_dot_product_attention_grad(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const Tensor& mask, const Tensor& out,
                                                        const Tensor& lse, const Tensor& dy,
                                                        const AttentionOptions& options);

/// The same as a composition of ops (batch_matmul, softmax, dropout, batch_matmul) holding the
/// [b, h, tq, tk] scores: the fused op's reference, and the path that returns the
/// probabilities (before dropout) in *probabilities when it is not null.
Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
                           const AttentionOptions& options = {}, Tensor* probabilities = nullptr);

}  // namespace lockstep
