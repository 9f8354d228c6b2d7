#include "lockstep/layers/group_normalization.hpp"

#include <memory>
#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "nn/config_reader.hpp"
#include "nn/normalization_common.hpp"

namespace lockstep::layers {

namespace {
using nlohmann::json;

// An axis of an input of `rank` axes counted from the first (negative: from the last), checked to
// be one after the batch's: these layers normalise each example by itself.
int example_axis(int axis, std::size_t rank, const std::string& layer, const char* cls) {
  const int r = static_cast<int>(rank), a = axis < 0 ? axis + r : axis;
  LOCKSTEP_CHECK(a >= 0 && a < r, "layer '", layer, "' (", cls, "): Axis ", axis, " is out of bounds for input shape of ",
                 rank, " axes");
  LOCKSTEP_CHECK(a != 0, "layer '", layer, "' (", cls, "): axis ", axis,
                 " is the batch's; lockstep normalises each example by itself (an axis after the batch's)");
  return a;
}

// The mean over axes 1, 3 and 4 of x (batch, outer, groups, group channels, inner), kept as
// size-1 axes: each (example, group)'s.
Tensor group_mean(const Tensor& x) { return mean(mean(mean(x, 4, true), 3, true), 1, true); }
}  // namespace

// ---- GroupNormalization (keras/src/layers/normalization/group_normalization.py) ----

GroupNormalizationLayer::GroupNormalizationLayer(const GroupNormalizationOptions& o) : Layer(o.name), options_(o) {
  LOCKSTEP_CHECK(o.groups > 0 || o.groups == -1,
                 "Received an invalid value for argument `groups`, expected a positive integer (or `-1` for instance "
                 "normalization). Received: groups=",
                 o.groups);
  LOCKSTEP_CHECK(o.epsilon > 0.0f, "GroupNormalization: epsilon must be positive, got ", o.epsilon);
  for (const auto* init : {&o.beta_initializer, &o.gamma_initializer}) (void)Initializer{*init}(Shape{0}, 0);
}

int GroupNormalizationLayer::channel_axis(std::size_t rank) const {
  return example_axis(options_.axis, rank, name(), "GroupNormalization");
}

Shape GroupNormalizationLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() >= 2, "layer '", name(), "' (GroupNormalization) needs inputs (batch, ..., channels), got ",
                 s.str());
  (void)channel_axis(s.rank());
  return s;
}

void GroupNormalizationLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  const std::int64_t channels = s.dims()[static_cast<std::size_t>(channel_axis(s.rank()))];
  LOCKSTEP_CHECK(channels > 0, "Axis ", options_.axis,
                 " of input tensor should have a defined dimension but the layer received an input with shape ",
                 s.str(), ".");
  groups_ = options_.groups == -1 ? channels : options_.groups;
  // Keras' messages (the second says "multiple" where it means a divisor).
  LOCKSTEP_CHECK(channels >= groups_, "layer '", name(), "' (GroupNormalization): Number of groups (", groups_,
                 ") cannot be more than the number of channels (", channels, ").");
  LOCKSTEP_CHECK(channels % groups_ == 0, "layer '", name(), "' (GroupNormalization): Number of groups (", groups_,
                 ") must be a multiple of the number of channels (", channels, ").");
  // Keras' order (and so its weight file's): gamma, then beta.
  const Shape per_channel{channels};
  if (options_.scale)
    gamma_ = add_weight("gamma", per_channel, Initializer{options_.gamma_initializer}, mix_seed(seed, 1));
  if (options_.center)
    beta_ = add_weight("beta", per_channel, Initializer{options_.beta_initializer}, mix_seed(seed, 2));
}

Tensor GroupNormalizationLayer::call(const Tensor& x, const CallContext&) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (GroupNormalization) is called before it was built");
  LOCKSTEP_CHECK(x.rank() == input_shape().rank() && x.shape().tail() == input_shape().tail(), "layer '", name(),
                 "' (GroupNormalization) was built for inputs ", input_shape().str(), " but receives ",
                 x.shape().str());
  const std::size_t a = static_cast<std::size_t>(channel_axis(x.rank()));
  const auto& dims = x.shape().dims();
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 1; i < a; ++i) outer *= dims[i];
  for (std::size_t i = a + 1; i < dims.size(); ++i) inner *= dims[i];
  const std::int64_t channels = dims[a], per_group = channels / groups_;
  // (batch, outer, groups, channels per group, inner): Keras' _reshape_into_groups with the axes
  // before and after the channels' each made one; statistics over all but the batch and groups.
  // Keras computes in float32 (result_type(input, float32)) and casts back.
  const Tensor g = reshape(cast(x, DType::kF32), Shape{dims[0], outer, groups_, per_group, inner});
  const Tensor mu = group_mean(g);
  const Tensor centred = sub(g, mu);
  const Tensor variance = group_mean(square(centred));
  Tensor y = mul(centred, pow_scalar(add_scalar(variance, options_.epsilon), -0.5f));
  const Shape broadcast{1, 1, groups_, per_group, 1};
  if (gamma_.defined()) y = mul(y, reshape(cast(gamma_.value(), DType::kF32), broadcast));
  if (beta_.defined()) y = add(y, reshape(cast(beta_.value(), DType::kF32), broadcast));
  return cast(reshape(y, x.shape()), compute_dtype());
}

json GroupNormalizationLayer::get_config() const {
  json c = Layer::get_config();
  const auto& o = options_;
  c.update({{"groups", o.groups}, {"axis", o.axis}, {"epsilon", o.epsilon}, {"center", o.center},
            {"scale", o.scale}, {"beta_initializer", o.beta_initializer},
            {"gamma_initializer", o.gamma_initializer}});
  return c;
}

LayerPtr GroupNormalizationLayer::from_config(const json& c) {
  auto r = layer_config_reader("GroupNormalization", c);
  GroupNormalizationOptions o;
  o.groups = r.integer("groups", o.groups);
  const json& axis = c.contains("axis") ? r.value("axis") : json(-1);
  // Keras' GroupNormalization takes one axis (an int); a list of one is the same.
  const json& one = axis.is_array() && axis.size() == 1 ? axis[0] : axis;
  if (!one.is_number_integer() || std::abs(one.get<std::int64_t>()) > (1 << 20))
    r.fail("axis", axis, "is not supported (one axis, an integer)");
  o.axis = one.get<int>();
  return std::make_shared<GroupNormalizationLayer>(detail::read_affine_options(r, o));
}

// ---- UnitNormalization (keras/src/layers/normalization/unit_normalization.py) ----

UnitNormalizationLayer::UnitNormalizationLayer(std::vector<int> axes, bool axis_is_list, std::string name)
    : Layer(std::move(name)), axes_(std::move(axes)), axis_is_list_(axis_is_list) {
  LOCKSTEP_CHECK(!axes_.empty(), "UnitNormalization: axis is an empty list");
  LOCKSTEP_CHECK(axes_.size() == 1 || axis_is_list_, "UnitNormalization: several axes are a list");
}

Shape UnitNormalizationLayer::compute_output_shape(const Shape& s) const {
  for (int axis : axes_) (void)example_axis(axis, s.rank(), name(), "UnitNormalization");
  return s;
}

void UnitNormalizationLayer::build_impl(const Shape& s, std::uint64_t) { (void)compute_output_shape(s); }

Tensor UnitNormalizationLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  // Keras' ops.normalize(order=2, epsilon=1e-12): x * min(rsqrt(sum(x^2)), 1 / epsilon), written as
  // x * rsqrt(max(sum(x^2), epsilon^2)): the same values, and a finite gradient where a sum is 0.
  // A 16-bit input is summed in float32 (its squares overflow float16) and the output cast back.
  const Tensor in = autocast(x), wide = cast(in, DType::kF32);
  Tensor sum_squares = square(wide);
  std::vector<bool> summed(x.rank(), false);
  for (int axis : axes_) {
    const auto a = static_cast<std::size_t>(example_axis(axis, x.rank(), name(), "UnitNormalization"));
    if (summed[a]) continue;  // an axis listed twice is one axis
    summed[a] = true;
    sum_squares = sum(sum_squares, static_cast<int>(a), true);
  }
  const Tensor inv_norm = pow_scalar(maximum(sum_squares, Tensor::full(Shape{}, 1e-24)), -0.5f);
  return cast(mul(wide, inv_norm), in.dtype());
}

json UnitNormalizationLayer::get_config() const {
  json c = Layer::get_config();
  c["axis"] = axis_is_list_ ? json(axes_) : json(axes_[0]);
  return c;
}

LayerPtr UnitNormalizationLayer::from_config(const json& c) {
  auto r = layer_config_reader("UnitNormalization", c);
  constexpr std::int64_t kAxis = 1 << 20;  // past any rank: the layer checks the axes
  const bool list = c.contains("axis") && r.value("axis").is_array();
  std::vector<int> axes;
  if (list) {
    for (std::int64_t a : r.integers("axis", -kAxis, kAxis)) axes.push_back(static_cast<int>(a));
  } else {
    axes.push_back(static_cast<int>(c.contains("axis") ? r.integer_in("axis", -kAxis, kAxis) : -1));
  }
  return std::make_shared<UnitNormalizationLayer>(std::move(axes), list, r.string("name"));
}

LayerPtr GroupNormalization(const GroupNormalizationOptions& options) {
  return std::make_shared<GroupNormalizationLayer>(options);
}
LayerPtr UnitNormalization(std::vector<int> axes) {
  const bool list = axes.size() != 1;
  return std::make_shared<UnitNormalizationLayer>(std::move(axes), list);
}

}  // namespace lockstep::layers
