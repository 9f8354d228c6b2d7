#include "lockstep/layers/normalization_layers.hpp"

#include <memory>

namespace lockstep::layers {

namespace {
// sum over replicas, differentiable: the gradient of every replica's input is the sum of the
// replicas' output gradients (an all-reduce in the backward pass, in the same tape order on
// every replica).
class AllReduceSumGradient final : public CustomGradient {
 public:
  explicit AllReduceSumGradient(ReplicaInterface* replica) : replica_(replica) {}
  const char* name() const override { return "all_reduce_sum"; }
  std::array<Tensor, 3> backward(const OpRecord&, const Tensor& g, const std::array<bool, 3>&) const override {
    return {replica_->all_reduce(ReduceOp::kSum, g), {}, {}};
  }

 private:
  ReplicaInterface* replica_;
};

Tensor all_reduce_sum(ReplicaInterface* replica, const Tensor& x) {
  const Tensor y = replica->all_reduce(ReduceOp::kSum, x);
  record_custom({x, Tensor(), Tensor()}, y, std::make_shared<AllReduceSumGradient>(replica));
  return y;
}

VariableOptions state(const char* name) {
  return {.name = name,
          .trainable = false,
          .synchronization = VariableSynchronization::kOnRead,
          .aggregation = VariableAggregation::kMean};
}
}  // namespace

BatchNormalizationLayer::BatchNormalizationLayer(const BatchNormalizationOptions& o) : Layer(o.name), options_(o) {
  LOCKSTEP_CHECK(o.momentum >= 0.0f && o.momentum <= 1.0f, "BatchNormalization: momentum must be in [0, 1], got ",
                 o.momentum);
  LOCKSTEP_CHECK(o.epsilon > 0.0f, "BatchNormalization: epsilon must be positive, got ", o.epsilon);
  for (const auto* init : {&o.beta_initializer, &o.gamma_initializer, &o.moving_mean_initializer,
                           &o.moving_variance_initializer})
    (void)Initializer{*init}(Shape{0}, 0);
}

void BatchNormalizationLayer::build_impl(const Shape& s, std::uint64_t seed) {
  LOCKSTEP_CHECK(s.rank() >= 2 && s[-1] > 0, "layer '", name(),
                 "' (BatchNormalization) needs inputs with a batch and a known channel axis, got ", s.str());
  const Shape c{s[-1]};
  if (options_.scale) gamma_ = add_weight("gamma", c, Initializer{options_.gamma_initializer}, mix_seed(seed, 1));
  if (options_.center) beta_ = add_weight("beta", c, Initializer{options_.beta_initializer}, mix_seed(seed, 2));
  moving_mean_ = add_weight(c, Initializer{options_.moving_mean_initializer}, mix_seed(seed, 3), state("moving_mean"));
  moving_variance_ =
      add_weight(c, Initializer{options_.moving_variance_initializer}, mix_seed(seed, 4), state("moving_variance"));
}

Tensor BatchNormalizationLayer::normalize(const Tensor& x2d, const Tensor& mean, const Tensor& variance) const {
  Tensor k = pow_scalar(add_scalar(variance, options_.epsilon), -0.5f);
  if (gamma_.defined()) k = mul(k, gamma_.value());
  Tensor y = mul(sub(x2d, mean), k);
  return beta_.defined() ? add(y, beta_.value()) : y;
}

Tensor BatchNormalizationLayer::call(const Tensor& x, const CallContext& ctx) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (BatchNormalization) is called before it was built");
  const std::int64_t c = moving_mean_.shape()[0];
  LOCKSTEP_CHECK(x.rank() >= 2 && x.dim(-1) == c, "layer '", name(), "' (BatchNormalization) expects ", c,
                 " channels on the last axis but receives ", x.shape().str());
  const std::int64_t rows = x.numel() / c;
  const Tensor x2d = reshape(x, Shape{rows, c});
  if (!ctx.training) return reshape(normalize(x2d, moving_mean_.value(), moving_variance_.value()), x.shape());

  ReplicaInterface* sync = options_.synchronized && ctx.replica && ctx.replica->num_replicas_in_sync() > 1
                               ? ctx.replica
                               : nullptr;
  double count = static_cast<double>(rows);
  if (sync) count = sync->all_reduce(ReduceOp::kSum, Tensor::full({1}, count)).item();
  if (count == 0) return x;
  const auto total = [&](const Tensor& t) { return sync ? all_reduce_sum(sync, sum(t, 0)) : sum(t, 0); };
  // Two passes (mean, then the mean square deviation): no cancellation for large means.
  const Tensor mean = scale(total(x2d), static_cast<float>(1.0 / count));
  const Tensor variance = scale(total(square(sub(x2d, mean))), static_cast<float>(1.0 / count));
  const Tensor y = normalize(x2d, mean, variance);
  // Synchronised replicas all know the global statistics, an empty slice's included.
  if (sync || rows > 0) {
    const float m = options_.momentum;
    moving_mean_.assign(add(scale(moving_mean_.value(), m), scale(stop_gradient(mean), 1.0f - m)));
    moving_variance_.assign(add(scale(moving_variance_.value(), m), scale(stop_gradient(variance), 1.0f - m)));
  }
  return reshape(y, x.shape());
}

LayerPtr BatchNormalization(const BatchNormalizationOptions& options) {
  return std::make_shared<BatchNormalizationLayer>(options);
}

}  // namespace lockstep::layers
