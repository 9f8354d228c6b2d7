#pragma once
// Layers for sequences [batch, steps, features], with Keras 3's names, defaults and weights:
// Embedding, GlobalAveragePooling1D, GlobalMaxPooling1D, RepeatVector, Permute (Conv1D and the
// 1D pooling layers are with the other convolutions: conv_layers.hpp).
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

struct EmbeddingOptions {
  std::int64_t input_dim = 0;   // the vocabulary: indices in [0, input_dim)
  std::int64_t output_dim = 0;  // features per index
  /// Keras' "uniform": RandomUniform(-0.05, 0.05).
  std::string embeddings_initializer = "uniform";
  /// Index 0 is padding (Keras' mask_zero): the output's mask is `input != 0`, which models carry
  /// to the layers after it (see Layer::compute_mask).
  bool mask_zero = false;
  std::string name;
};

/// Maps integer indices [b, ...] to rows of the table "embeddings" [input_dim, output_dim]:
/// [b, ..., output_dim]. A floating input is cast to integers as Keras does (truncated); an index
/// outside [0, input_dim) is a ValueError naming it. The table's gradient is the output's
/// scatter-added into the rows that were read.
class EmbeddingLayer final : public Layer {
 public:
  explicit EmbeddingLayer(const EmbeddingOptions& options);
  std::string class_name() const override { return "Embedding"; }
  Tensor compute_mask(const Tensor& x, const Tensor& mask) const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const EmbeddingOptions& options() const { return options_; }
  const Variable& embeddings() const { return embeddings_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  EmbeddingOptions options_;
  Variable embeddings_;
};

/// The mean over the steps of [b, steps, features] (channels_last): [b, features], or
/// [b, 1, features] with keepdims. Given a mask, the mean of the steps it keeps (as Keras; a row
/// whose steps are all masked is 0 / 0).
class GlobalAveragePooling1DLayer final : public Layer {
 public:
  explicit GlobalAveragePooling1DLayer(bool keepdims = false, std::string name = "");
  std::string class_name() const override { return "GlobalAveragePooling1D"; }
  bool supports_masking() const override { return true; }
  Tensor compute_mask(const Tensor&, const Tensor&) const override { return Tensor(); }
  Tensor call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const override;
  bool call_takes_mask() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  bool keepdims_;
};

/// The maximum over the steps of [b, steps, features] (channels_last): [b, features], or
/// [b, 1, features] with keepdims (reduce_max). As Keras 3's, it ignores a mask (masked steps
/// count; the mask ends here, as for any layer that does not support masking). The gradient goes
/// to each feature's first maximal step; TensorFlow's reduce_max (Keras' ops.max) splits it
/// evenly among tied steps instead, a difference only where steps tie exactly (after a ReLU, ties
/// at 0 get no gradient either way).
class GlobalMaxPooling1DLayer final : public Layer {
 public:
  explicit GlobalMaxPooling1DLayer(bool keepdims = false, std::string name = "");
  std::string class_name() const override { return "GlobalMaxPooling1D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  bool keepdims_;
};

/// [b, features] -> [b, n, features]: each example's vector n times.
class RepeatVectorLayer final : public Layer {
 public:
  explicit RepeatVectorLayer(std::int64_t n, std::string name = "");
  std::string class_name() const override { return "RepeatVector"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  std::int64_t n_;
};

/// Permutes the axes after the batch: dims are 1-based, as Keras' (Permute((2, 1)) swaps the
/// two axes of [b, t, d]: [b, d, t]).
class PermuteLayer final : public Layer {
 public:
  explicit PermuteLayer(std::vector<int> dims, std::string name = "");
  std::string class_name() const override { return "Permute"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  std::vector<int> dims_;
};

LayerPtr Embedding(std::int64_t input_dim, std::int64_t output_dim, bool mask_zero = false);
LayerPtr Embedding(const EmbeddingOptions& options);
LayerPtr GlobalAveragePooling1D(bool keepdims = false);
LayerPtr GlobalMaxPooling1D(bool keepdims = false);
LayerPtr RepeatVector(std::int64_t n);
LayerPtr Permute(std::vector<int> dims);

}  // namespace lockstep::layers
