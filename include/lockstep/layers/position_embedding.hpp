#pragma once
// PositionEmbedding with keras_hub's semantics (keras_hub.layers.PositionEmbedding): a learned
// table "embeddings" [sequence_length, features], one row per position. Called on a sequence
// [batch, ..., steps, features] it returns the table's first `steps` rows broadcast over the
// leading axes, the input's shape; the input's values are not read (a model adds the result to
// it: Add()([x, PositionEmbedding(steps)(x)])). Each row's gradient is the sum over the batch.
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

struct PositionEmbeddingOptions {
  /// The longest sequence: rows of the table. Inputs may be shorter (the first rows are used).
  std::int64_t sequence_length = 0;
  /// keras_hub's default.
  std::string initializer = "glorot_uniform";
  std::string name;
};

class PositionEmbeddingLayer final : public Layer {
 public:
  explicit PositionEmbeddingLayer(const PositionEmbeddingOptions& options);
  std::string class_name() const override { return "PositionEmbedding"; }
  std::string keras_module() const override { return "keras_hub.src.layers.modeling.position_embedding"; }
  std::string keras_registered_name() const override { return "keras_hub>PositionEmbedding"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const PositionEmbeddingOptions& options() const { return options_; }
  const Variable& embeddings() const { return embeddings_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  PositionEmbeddingOptions options_;
  Variable embeddings_;
};

LayerPtr PositionEmbedding(const PositionEmbeddingOptions& options);
LayerPtr PositionEmbedding(std::int64_t sequence_length);

}  // namespace lockstep::layers
