#pragma once
// BatchNormalization with Keras 3's arguments and defaults, over the last axis (channels_last).
//
// Training: each channel is normalised with the batch's mean and (biased) variance, and the
// moving statistics follow them: moving = moving * momentum + batch * (1 - momentum).
// Inference: the moving statistics are used.
//
// Under a strategy, with synchronized = true (Keras 3's SyncBatchNorm) the batch statistics
// are those of the GLOBAL batch: per-replica sums are all-reduced (in the forward pass, and
// their gradients in the backward pass), so N replicas compute what one device would and
// every replica's moving statistics stay identical. With synchronized = false (the default,
// as in Keras) each replica normalises with its own slice's statistics and updates its own
// copy of the moving statistics; read outside the replicas (checkpoints, saved models, a
// model used without the strategy) a moving statistic is the mean of the replicas' copies. A
// replica whose slice is empty leaves its copy as it was.
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

struct BatchNormalizationOptions {
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  bool center = true;  // beta
  bool scale = true;   // gamma
  std::string beta_initializer = "zeros";
  std::string gamma_initializer = "ones";
  std::string moving_mean_initializer = "zeros";
  std::string moving_variance_initializer = "ones";
  bool synchronized = false;
  std::string name;
};

class BatchNormalizationLayer final : public Layer {
 public:
  explicit BatchNormalizationLayer(const BatchNormalizationOptions& options = {});
  std::string class_name() const override { return "BatchNormalization"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const BatchNormalizationOptions& options() const { return options_; }
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_variance_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor normalize(const Tensor& x, const Tensor& mean, const Tensor& variance, double count,
                   ReplicaInterface* sync) const;
  BatchNormalizationOptions options_;
  Variable gamma_, beta_, moving_mean_, moving_variance_;
};

LayerPtr BatchNormalization(const BatchNormalizationOptions& options = {});

}  // namespace lockstep::layers
