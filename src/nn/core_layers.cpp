#include "lockstep/layers/core_layers.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

DenseLayer::DenseLayer(const DenseOptions& options)
    : Layer(options.name), options_(options), activation_(parse_activation(options.activation)) {
  LOCKSTEP_CHECK(options.units > 0, "Dense: units must be positive, got ", options.units);
  if (!options.dtype.empty()) set_dtype_policy(mixed_precision::Policy(options.dtype));
  if (options.input_dim) {
    LOCKSTEP_CHECK(*options.input_dim > 0, "Dense: input_dim must be positive, got ", *options.input_dim);
    declared_input_shape_ = Shape{*options.input_dim};
  }
  // Validate initializer names now rather than at build time.
  (void)Initializer{options.kernel_initializer}(Shape{0}, 0);
  (void)Initializer{options.bias_initializer}(Shape{0}, 0);
}

Shape DenseLayer::compute_output_shape(const Shape& s) const {
  // As Keras: the kernel applies to the last axis, [b, ..., d] -> [b, ..., units].
  LOCKSTEP_CHECK(s.rank() >= 2, "layer '", name(), "' (Dense) needs inputs of shape (batch, ..., features), got ",
                 s.str());
  std::vector<std::int64_t> dims = s.dims();
  dims.back() = options_.units;
  return Shape(std::move(dims));
}

void DenseLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  LOCKSTEP_CHECK(s[-1] > 0, "layer '", name(), "' (Dense): input shape ", s.str(), " has no features");
  kernel_ = add_weight("kernel", Shape{s[-1], options_.units}, Initializer{options_.kernel_initializer},
                       mix_seed(seed, 1));
  if (options_.use_bias) {
    bias_ = add_weight("bias", Shape{options_.units}, Initializer{options_.bias_initializer}, mix_seed(seed, 2));
  }
}

Tensor DenseLayer::linear(const Tensor& x, bool fuse_relu) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (Dense) is called before it was built");
  LOCKSTEP_CHECK(x.rank() == input_shape().rank() && x.dim(-1) == kernel_.shape()[0], "layer '", name(),
                 "' (Dense) was built for inputs ", input_shape().str(), " but receives ", x.shape().str());
  const auto act = fuse_relu ? FusedActivation::kRelu : FusedActivation::kNone;
  const Tensor b = bias_.defined() ? autocast(bias_.value()) : Tensor();
  if (x.rank() == 2) return dense(autocast(x), autocast(kernel_.value()), b, act);
  // Higher ranks: the leading axes as one of rows, from the shape (a replica's slice may be empty).
  const Tensor rows = reshape(autocast(x), {x.shape().numel() / x.dim(-1), x.dim(-1)});
  return reshape(dense(rows, autocast(kernel_.value()), b, act), compute_output_shape(x.shape()));
}

Tensor DenseLayer::call(const Tensor& x, const CallContext&) const {
  if (activation_ == ActivationKind::kRelu) return linear(x, true);
  return apply_activation(activation_, linear(x, false));
}

Tensor DenseLayer::call_logits(const Tensor& x, const CallContext&) const { return linear(x, false); }

ActivationLayer::ActivationLayer(const std::string& activation, std::string name)
    : Layer(std::move(name)), kind_(parse_activation(activation)) {}

Tensor ActivationLayer::call(const Tensor& x, const CallContext&) const { return apply_activation(kind_, autocast(x)); }

Shape FlattenLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() >= 1, "Flatten needs a batch dimension, got ", s.str());
  std::int64_t n = 1;
  for (std::size_t i = 1; i < s.rank(); ++i) n *= s.dims()[i];
  return Shape{s[0], n};
}

Tensor FlattenLayer::call(const Tensor& x, const CallContext&) const {
  // From the shape, not numel / rows: a replica's empty slice still has (0, features).
  return reshape(x, compute_output_shape(x.shape()));
}

ReshapeLayer::ReshapeLayer(Shape target_shape, std::string name)
    : Layer(std::move(name)), target_(std::move(target_shape)) {}

Shape ReshapeLayer::compute_output_shape(const Shape& s) const {
  std::int64_t in = 1;
  for (std::size_t i = 1; i < s.rank(); ++i) in *= s.dims()[i];
  std::int64_t known = 1;
  int unknown = -1;
  std::vector<std::int64_t> dims{s[0]};
  for (std::size_t i = 0; i < target_.rank(); ++i) {
    const auto d = target_.dims()[i];
    if (d == -1) {
      LOCKSTEP_CHECK(unknown < 0, "Reshape target ", target_.str(), " has more than one -1");
      unknown = static_cast<int>(i) + 1;
    } else {
      known *= d;
    }
    dims.push_back(d);
  }
  if (unknown > 0) {
    LOCKSTEP_CHECK(known > 0 && in % known == 0, "layer '", name(), "' (Reshape) cannot reshape input ", s.str(),
                   " into ", target_.str());
    dims[static_cast<std::size_t>(unknown)] = in / known;
  } else {
    LOCKSTEP_CHECK(known == in, "layer '", name(), "' (Reshape) cannot reshape input ", s.str(), " into ",
                   target_.str());
  }
  return Shape(std::move(dims));
}

Tensor ReshapeLayer::call(const Tensor& x, const CallContext&) const {
  Shape out = compute_output_shape(x.shape());
  return reshape(x, out);
}

SoftmaxLayer::SoftmaxLayer(int axis, std::string name) : Layer(std::move(name)), axis_(axis) {}

Shape SoftmaxLayer::compute_output_shape(const Shape& s) const {
  const int rank = static_cast<int>(s.rank());
  LOCKSTEP_CHECK(axis_ >= -rank && axis_ < rank && axis_ != 0 && axis_ != -rank, "layer '", name(),
                 "' (Softmax): axis ", axis_, " is not an axis after the batch of inputs ", s.str());
  return s;
}

Tensor SoftmaxLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  const int rank = static_cast<int>(x.rank()), axis = axis_ < 0 ? axis_ + rank : axis_;
  if (axis == rank - 1) return softmax(autocast(x), -1);
  // Another axis: swapped with the last around the softmax kernel (which takes the last).
  std::vector<int> swap(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) swap[static_cast<std::size_t>(i)] = i;
  std::swap(swap[static_cast<std::size_t>(axis)], swap.back());
  return transpose(softmax(transpose(autocast(x), swap), -1), swap);
}

void SoftmaxLayer::check_call_mask(const Shape& mask, const Shape& input) const {
  // Keras 3's Softmax.call: the mask's axes from the last, each 1 or the input's (None: unknown).
  bool fits = mask.rank() <= input.rank();
  for (std::size_t k = 1; fits && k <= mask.rank(); ++k) {
    const std::int64_t m = mask.dims()[mask.rank() - k], i = input.dims()[input.rank() - k];
    fits = m < 0 || i < 0 || m == 1 || m == i;
  }
  LOCKSTEP_CHECK(fits, "layer '", name(), "' (Softmax): the mask must be broadcastable to the inputs (no more axes, "
                 "each of its axes from the last 1 or the input's), as Keras requires; got inputs ", input.str(),
                 " and a mask ", mask.str());
}

Tensor SoftmaxLayer::call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const {
  check_call_mask(mask.shape(), x.shape());
  const Tensor in = autocast(x);
  // Keras keeps a position where a boolean mask is true, another dtype's above 0.5 (an integer
  // mask: above 0); lockstep's masks are uint8 0 / 1, its booleans.
  const Tensor keep = is_floating(mask.dtype()) ? greater(mask, Tensor::full(Shape{}, 0.5, mask.dtype()))
                                                : not_equal(mask, Tensor::zeros(Shape{}, mask.dtype()));
  // where(keep, x, large_negative) (Keras' _large_negative_number: -3e4 in float16, else -1e9),
  // then where(keep, softmax, 0): a row masked whole is all zeros, not uniform.
  const double large_negative = in.dtype() == DType::kF16 ? -3e4 : -1e9;
  const Tensor masked = where(keep, in, Tensor::full(Shape{}, large_negative, in.dtype()));
  return where(keep, call(masked, ctx), Tensor::zeros(Shape{}, in.dtype()));
}

MaskingLayer::MaskingLayer(float mask_value, std::string name) : Layer(std::move(name)), mask_value_(mask_value) {
  LOCKSTEP_CHECK(std::isfinite(mask_value), "Masking: mask_value ", mask_value,
                 " is not finite; lockstep zeroes a masked step by multiplying it by the mask, so it takes finite "
                 "values only");
}

Shape MaskingLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() >= 2, "layer '", name(), "' (Masking) takes inputs (batch, ..., features), got ", s.str());
  return s;
}

Tensor MaskingLayer::compute_mask(const Tensor& x, const Tensor&) const {
  // Keras' rule, its one place here: a step counts where any feature differs from mask_value.
  (void)compute_output_shape(x.shape());
  const Tensor in = autocast(x);
  const Tensor differs = cast(not_equal(in, Tensor::full(Shape{}, mask_value_, in.dtype())), DType::kF32);
  return not_equal(reduce_max(differs, -1), Tensor::zeros(Shape{}, DType::kF32));
}

Tensor MaskingLayer::call(const Tensor& x, const CallContext& ctx) const {
  return call_with_output_mask(x, Tensor(), Tensor(), ctx);
}

Tensor MaskingLayer::call_with_output_mask(const Tensor& x, const Tensor&, const Tensor& output_mask,
                                           const CallContext&) const {
  // A model computes the output's mask before the call (compute_mask, whatever x's mask): the
  // call zeroes its steps rather than compare every feature again.
  const Tensor keep = output_mask.defined() ? output_mask : compute_mask(x, Tensor());
  std::vector<std::int64_t> steps = keep.shape().dims();
  steps.push_back(1);
  const Tensor in = autocast(x);
  return mul(in, cast(keep.reshape(Shape(std::move(steps))), in.dtype()));
}

InputLayer::InputLayer(Shape shape, std::string name) : Layer(std::move(name)) { declared_input_shape_ = shape; }

// Configurations (Keras' get_config / from_config).
using nlohmann::json;

json DenseLayer::get_config() const {
  json c = Layer::get_config();
  const auto& o = options_;
  c.update({{"units", o.units}, {"activation", activation_name(activation_)}, {"use_bias", o.use_bias},
            {"kernel_initializer", o.kernel_initializer}, {"bias_initializer", o.bias_initializer}});
  if (o.input_dim) c["input_dim"] = *o.input_dim;
  return c;
}
LayerPtr DenseLayer::from_config(const json& c) {
  auto r = layer_config_reader("Dense", c);
  DenseOptions o;
  o.units = r.integer("units");
  o.activation = r.string("activation");
  o.use_bias = r.boolean("use_bias");
  o.kernel_initializer = r.string("kernel_initializer");
  o.bias_initializer = r.string("bias_initializer");
  if (c.contains("input_dim")) o.input_dim = r.integer("input_dim");
  o.name = r.string("name");
  return std::make_shared<DenseLayer>(o);
}

json ActivationLayer::get_config() const {
  json c = Layer::get_config();
  c["activation"] = activation_name(kind_);
  return c;
}
LayerPtr ActivationLayer::from_config(const json& c) {
  auto r = layer_config_reader("Activation", c);
  return std::make_shared<ActivationLayer>(r.string("activation"), r.string("name"));
}

json SoftmaxLayer::get_config() const {
  json c = Layer::get_config();
  c["axis"] = axis_;
  return c;
}
LayerPtr SoftmaxLayer::from_config(const json& c) {
  // Keras writes one axis as an int or a list of one.
  auto r = layer_config_reader("Softmax", c);
  const json& a = c.contains("axis") ? r.value("axis") : json(-1);
  const json& one = a.is_array() && a.size() == 1 ? a[0] : a;
  if (!one.is_number_integer() || std::abs(one.get<std::int64_t>()) > (1 << 20))
    r.fail("axis", a, "is not supported (one axis only)");
  return std::make_shared<SoftmaxLayer>(one.get<int>(), r.string("name"));
}

json MaskingLayer::get_config() const {
  json c = Layer::get_config();
  c["mask_value"] = mask_value_;
  return c;
}
LayerPtr MaskingLayer::from_config(const json& c) {
  // Keras writes a tensor mask_value as a serialized object: one number only here.
  auto r = layer_config_reader("Masking", c);
  return std::make_shared<MaskingLayer>(r.real("mask_value", 0.0f), r.string("name"));
}

LayerPtr FlattenLayer::from_config(const json& c) {
  return std::make_shared<FlattenLayer>(layer_config_reader("Flatten", c).string("name"));
}

json ReshapeLayer::get_config() const {
  json c = Layer::get_config();
  c["target_shape"] = target_.dims();
  return c;
}
LayerPtr ReshapeLayer::from_config(const json& c) {
  auto r = layer_config_reader("Reshape", c);
  return std::make_shared<ReshapeLayer>(Shape(r.dimensions("target_shape")), r.string("name"));
}

json InputLayer::get_config() const {
  json c = Layer::get_config();
  c["shape"] = declared_input_shape()->dims();
  return c;
}
LayerPtr InputLayer::from_config(const json& c) {
  auto r = layer_config_reader("InputLayer", c);
  return std::make_shared<InputLayer>(Shape(r.dimensions("shape")), r.string("name"));
}

LayerPtr Dense(std::int64_t units, const std::string& activation, std::optional<std::int64_t> input_dim) {
  return std::make_shared<DenseLayer>(DenseOptions{.units = units, .activation = activation, .input_dim = input_dim});
}
LayerPtr Dense(const DenseOptions& options) { return std::make_shared<DenseLayer>(options); }
LayerPtr Dropout(float rate, std::vector<std::int64_t> noise_shape, std::optional<std::int64_t> seed) {
  return std::make_shared<DropoutLayer>(rate, std::move(noise_shape), seed);
}
LayerPtr Activation(const std::string& activation) { return std::make_shared<ActivationLayer>(activation); }
LayerPtr Softmax(int axis) { return std::make_shared<SoftmaxLayer>(axis); }
LayerPtr Masking(float mask_value) { return std::make_shared<MaskingLayer>(mask_value); }
LayerPtr Flatten() { return std::make_shared<FlattenLayer>(); }
LayerPtr Reshape(Shape target_shape) { return std::make_shared<ReshapeLayer>(std::move(target_shape)); }
LayerPtr Input(Shape shape) { return std::make_shared<InputLayer>(std::move(shape)); }

}  // namespace lockstep::layers
