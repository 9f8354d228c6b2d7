#pragma once
// Keras 3's MultiHeadAttention: query, key and value projected per head (EinsumDense kernels
// [features, heads, key_dim], biases [heads, key_dim]), scaled dot-product attention per head,
// and the heads projected back (kernel [heads, value_dim, output], bias [output]); Keras'
// weight names, order and file layout. In a Functional model it is called on a list,
// lockstep::call(mha, {query, value}) or {query, value, key} (Keras' mha(query, value, key));
// self-attention is call(mha, {x, x}). Inputs are [batch, length, features], every input with
// the query's features. The attention runs fused (scaled_dot_product_attention) unless the
// scores are asked for: in a Functional model, lockstep::call_outputs(mha, {query, value},
// {.return_attention_scores = true}) gives Keras' (output, scores).
//
// Masks, as Keras 3's call and _compute_attention_mask: the inputs' Keras masks (Embedding's
// mask_zero; a Functional model passes them as query_mask, value_mask and key_mask) decide what
// is attended to. A query step attends to a value step when the query's mask keeps the query
// step, the value's and the key's masks keep the value step, the causal mask allows it
// (use_causal_mask: value step <= query step) and the explicit attention_mask does. A query step
// with nothing to attend to (a padded one) attends to every value step alike, as Keras' masked
// softmax. The output's mask is the query's (merge_mask), so the layers after it (Add,
// LayerNormalization, GlobalAveragePooling1D) leave the padded query steps out as Keras does.
// One difference: Keras 3's call also deletes the masks of the tensors it is given, so in Keras a
// later MultiHeadAttention on the same tensor (a second call on x after mha(x, x)) sees no mask
// and attends to the padding; lockstep gives every reader of a tensor its mask.
#include "lockstep/layers/merge_layers.hpp"

namespace lockstep::layers {

struct MultiHeadAttentionOptions {
  std::int64_t num_heads = 1;
  std::int64_t key_dim = 1;
  std::optional<std::int64_t> value_dim;  // key_dim when not given
  float dropout = 0.0f;                   // on the attention probabilities, in training
  bool use_bias = true;
  std::optional<std::int64_t> output_shape;  // the query's features when not given
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};

/// Keras' call arguments besides the tensors.
struct AttentionCall {
  /// Keras' query_mask, value_mask and key_mask: the inputs' masks (any dtype, nonzero where a step
  /// counts; undefined: none), the query's [batch, query length], the value's and the key's
  /// [batch, value length]. Combined with attention_mask and use_causal_mask as the header says.
  Tensor query_mask, value_mask, key_mask;
  /// uint8 (1 = attend) [batch, query length, value length] or [batch, value length]; undefined: none.
  Tensor attention_mask;
  bool use_causal_mask = false;
  /// When not null, gets the attention probabilities [batch, heads, query length, value length]
  /// (before dropout), computed by the unfused path.
  Tensor* attention_scores = nullptr;
};

class MultiHeadAttentionLayer final : public MergeLayer {
 public:
  explicit MultiHeadAttentionLayer(const MultiHeadAttentionOptions& options);
  std::string class_name() const override { return "MultiHeadAttention"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  /// [query, value] or [query, value, key] shapes -> [batch, query length, output].
  Shape merge_output_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const override;
  /// The query's mask (Keras sets it on the output), whatever the value's and the key's are.
  Tensor merge_mask(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks) const override;
  /// Keras' call(query, value, key=None, attention_mask=None, use_causal_mask=False,
  /// return_attention_scores=False); key undefined: the value.
  Tensor attend(const Tensor& query, const Tensor& value, const Tensor& key, const CallContext& ctx,
                const AttentionCall& call = {}) const;
  /// A Functional model's call: attend with the inputs' masks and the call's keyword arguments;
  /// with return_attention_scores, [output, scores] (scores [batch, heads, query length, value length]).
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                   const CallContext& ctx) const override;
  /// Its call's attention_mask (of shape (batch, query length, value length)), use_causal_mask and
  /// return_attention_scores.
  void check_call_arguments(const CallSignature& call) const override;
  std::size_t output_count(const CallOptions& options) const override {
    return options.return_attention_scores ? 2 : 1;
  }
  std::string describe_outputs(const CallOptions& options) const override;
  std::vector<Shape> more_output_shapes(const std::vector<Shape>& inputs, const CallOptions& options) const override;
  /// Where a Keras weights file keeps variables()[index] under the layer's group: in its
  /// sublayers' groups, "query_dense/vars/0" ... "output_dense/vars/1".
  std::string keras_weight_path(std::size_t index) const override;
  /// Keras calls it on positional tensors, mha(query, value), and builds it from a shapes_dict
  /// {query_shape, value_shape[, key_shape]} (build(query_shape, value_shape, key_shape)).
  bool keras_positional_call() const override { return true; }
  nlohmann::json keras_build_config(const nlohmann::json& input_shapes) const override;
  const MultiHeadAttentionOptions& options() const { return options_; }
  std::int64_t value_dim() const { return options_.value_dim.value_or(options_.key_dim); }

 protected:
  void build_impl(const Shape& query_shape, std::uint64_t seed) override;

 private:
  MultiHeadAttentionOptions options_;
  std::uint64_t stream_ = 0;  // dropout's stream
  // query, key, value and output projections: kernel and (use_bias) bias each.
  struct Projection {
    Variable kernel, bias;
  };
  Projection query_, key_, value_, output_;
  Tensor project(const Projection& p, const Tensor& x, std::int64_t per_head) const;
  /// The uint8 mask the attention kernel takes for this call (undefined: none), the causal mask
  /// left to the kernel: Keras' _compute_attention_mask.
  Tensor attention_mask(const Tensor& query, const Tensor& value, const AttentionCall& call) const;
};

LayerPtr MultiHeadAttention(const MultiHeadAttentionOptions& options);

}  // namespace lockstep::layers
