#include "lockstep/layers/normalization_layers.hpp"

#include <memory>
#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "nn/normalization_common.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
using detail::RecordingPaused;
using detail::wide;

// The gradient of y = (x - mean) * k + beta, k = gamma * inv_std. In training mean and inv_std
// are the statistics of x's rows (of every replica's rows when synchronised): two fused passes
// over x and dy, as cuDNN's and PyTorch's batch norm backward. In inference they are the moving
// statistics, constants: dx = dy * k. Synchronised, the input's gradient
// needs the GLOBAL sums of dy and dy * xhat (one all-reduce, made by every replica in the same
// tape order); gamma's and beta's gradients are the replica's own sums, all-reduced with the
// other variables' gradients by the optimizer.
class BatchNormGradient final : public CustomGradient {
 public:
  // count 0: inference (the statistics do not depend on x).
  BatchNormGradient(Tensor mean, Tensor inv_std, Tensor k, double count, ReplicaInterface* sync)
      : mean_(std::move(mean)), inv_std_(std::move(inv_std)), k_(std::move(k)), count_(count), sync_(sync) {}
  const char* name() const override { return "batch_normalization"; }
  std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g16, const std::array<bool, 3>& needs) const override {
    const DType dtype = r.inputs[0].dtype();
    const Tensor x = wide(r.inputs[0]);
    const Tensor g = wide(g16);
    std::array<Tensor, 3> out;
    if (needs[0] && count_ == 0) out[0] = mul(g, k_);
    // The sums: for gamma's and beta's gradients, and in training for the input's.
    if (!needs[1] && !needs[2] && (!needs[0] || count_ == 0)) return narrowed(out, dtype);
    const auto [sum_dy, sum_dy_xhat] = batch_norm_grad_sums(g, x, mean_, inv_std_);
    if (needs[0] && count_ > 0) {
      Tensor total_dy = sum_dy, total_dy_xhat = sum_dy_xhat;
      if (sync_) {
        const std::int64_t c = sum_dy.numel();
        const Tensor both = sync_->all_reduce(ReduceOp::kSum, concat({sum_dy, sum_dy_xhat}, 0));
        total_dy = both.slice(0, c);
        total_dy_xhat = both.slice(c, 2 * c);
      }
      const auto inv_n = static_cast<float>(1.0 / count_);
      out[0] = batch_norm_input_grad(g, x, mean_, inv_std_, k_, scale(total_dy, inv_n), scale(total_dy_xhat, inv_n));
    }
    if (needs[1]) out[1] = sum_dy_xhat;
    if (needs[2]) out[2] = sum_dy;
    return narrowed(out, dtype);
  }

 private:
  // The input's gradient in the input's dtype; gamma's and beta's stay float32 (their variables').
  static std::array<Tensor, 3> narrowed(std::array<Tensor, 3> out, DType dtype) {
    if (out[0].defined() && dtype != DType::kF32) out[0] = out[0].to(dtype);
    return out;
  }
  Tensor mean_, inv_std_, k_;
  double count_;
  ReplicaInterface* sync_;
};

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

// y = (x - mean) * k + beta with k = gamma / sqrt(variance + epsilon), in one pass, its gradient
// recorded as one op. count: the rows the statistics are of (0: the moving statistics). A 16-bit x
// is normalised in float32 and y rounded back to x's dtype.
Tensor BatchNormalizationLayer::normalize(const Tensor& x, const Tensor& mean, const Tensor& variance, double count,
                                          ReplicaInterface* sync) const {
  const Tensor gamma = gamma_.defined() ? gamma_.value() : Tensor();
  const Tensor beta = beta_.defined() ? beta_.value() : Tensor();
  Tensor inv_std, k, y;
  {
    const RecordingPaused paused;
    inv_std = pow_scalar(add_scalar(variance, options_.epsilon), -0.5f);
    k = gamma.defined() ? mul(inv_std, gamma) : inv_std;
    y = batch_norm_apply(wide(x), mean, k, beta);
    if (x.dtype() != DType::kF32) y = y.to(x.dtype());
  }
  record_custom({x, gamma, beta}, y, std::make_shared<BatchNormGradient>(mean, inv_std, k, count, sync));
  return y;
}

Tensor BatchNormalizationLayer::call(const Tensor& x, const CallContext& ctx) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (BatchNormalization) is called before it was built");
  const std::int64_t c = moving_mean_.shape()[0];
  LOCKSTEP_CHECK(x.rank() >= 2 && x.dim(-1) == c, "layer '", name(), "' (BatchNormalization) expects ", c,
                 " channels on the last axis but receives ", x.shape().str());
  const std::int64_t rows = x.numel() / c;
  // As Keras 3: 16-bit inputs are normalised in float32 (their statistics overflow float16),
  // and the output is in the input's dtype.
  const Tensor x2d = reshape(x, Shape{rows, c});
  const auto output = [&](const Tensor& y) { return reshape(y, x.shape()); };
  // Keras' rule: a frozen BatchNormalization runs in inference mode even in training (fit), on
  // its moving statistics, which it then leaves alone (fine-tuning keeps what the base learned).
  if (!ctx.training || !trainable()) return output(normalize(x2d, moving_mean_.value(), moving_variance_.value(), 0, nullptr));

  ReplicaInterface* sync = options_.synchronized && ctx.replica && ctx.replica->num_replicas_in_sync() > 1
                               ? ctx.replica
                               : nullptr;
  double count = static_cast<double>(rows);
  if (sync) count = sync->all_reduce(ReduceOp::kSum, Tensor::full({1}, count)).item();
  if (count == 0) return x;
  Tensor mean, variance;
  {
    const RecordingPaused paused;
    const Tensor xf = wide(x2d);
    const auto total = [&](const Tensor& t) { return sync ? sync->all_reduce(ReduceOp::kSum, t) : t; };
    // Two passes (mean, then the mean square deviation): no cancellation for large means.
    mean = scale(total(sum(xf, 0)), static_cast<float>(1.0 / count));
    variance = scale(total(batch_norm_squared_deviations(xf, mean)), static_cast<float>(1.0 / count));
  }
  const Tensor y = normalize(x2d, mean, variance, count, sync);
  // Synchronised replicas all know the global statistics, an empty slice's included. predict and
  // evaluate (read_only) normalise by them and keep the moving statistics.
  if ((sync || rows > 0) && !ctx.read_only) {
    const float m = options_.momentum;
    moving_mean_.assign(add(scale(moving_mean_.value(), m), scale(mean, 1.0f - m)));
    moving_variance_.assign(add(scale(moving_variance_.value(), m), scale(variance, 1.0f - m)));
  }
  return output(y);
}

nlohmann::json BatchNormalizationLayer::get_config() const {
  nlohmann::json c = Layer::get_config();
  const auto& o = options_;
  c.update({{"axis", -1}, {"momentum", o.momentum}, {"epsilon", o.epsilon}, {"center", o.center}, {"scale", o.scale},
            {"beta_initializer", o.beta_initializer}, {"gamma_initializer", o.gamma_initializer},
            {"moving_mean_initializer", o.moving_mean_initializer},
            {"moving_variance_initializer", o.moving_variance_initializer}, {"synchronized", o.synchronized}});
  return c;
}

LayerPtr BatchNormalizationLayer::from_config(const nlohmann::json& c) {
  check_last_axis(c, "BatchNormalization");
  BatchNormalizationOptions o;
  auto r = layer_config_reader("BatchNormalization", c);
  o.momentum = r.real("momentum", o.momentum);
  o.moving_mean_initializer = r.string("moving_mean_initializer", o.moving_mean_initializer);
  o.moving_variance_initializer = r.string("moving_variance_initializer", o.moving_variance_initializer);
  o.synchronized = r.boolean("synchronized", false);
  return std::make_shared<BatchNormalizationLayer>(detail::read_affine_options(r, o));
}

LayerPtr BatchNormalization(const BatchNormalizationOptions& options) {
  return std::make_shared<BatchNormalizationLayer>(options);
}

}  // namespace lockstep::layers
