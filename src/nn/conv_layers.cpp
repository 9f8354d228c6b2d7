#include "lockstep/layers/conv_layers.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/layers/image_resize.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
std::string pair_str(const std::array<std::int64_t, 2>& p) { return detail::concat("(", p[0], ", ", p[1], ")"); }

void check_positive(const char* layer, const char* what, const Pair& p) {
  LOCKSTEP_CHECK(p[0] > 0 && p[1] > 0, layer, ": ", what, " must be positive, got ", pair_str(p));
}
void check_positive(const char* layer, const char* what, std::int64_t v) {
  LOCKSTEP_CHECK(v > 0, layer, ": ", what, " must be positive, got ", v);
}

void check_image(const std::string& name, const char* cls, const Shape& s) {
  LOCKSTEP_CHECK(s.rank() == 4, "layer '", name, "' (", cls,
                 ") needs inputs of shape (batch, height, width, channels), got ", s.str(),
                 "; add a Reshape layer before it (channels_last is the only data_format)");
}

// Keras' output length along one spatial dimension (an unknown -1 stays unknown).
std::int64_t output_length(std::int64_t in, PaddingMode mode, std::int64_t window, std::int64_t stride,
                           std::int64_t dilation) {
  if (in < 0) return -1;
  if (mode != PaddingMode::kValid) return (in + stride - 1) / stride;  // "same" and "causal"
  return window_output_size(in, window, stride, dilation, 0, 0);
}

// ---- sequences: (N, steps, C) as the (N, 1, steps, C) image the 2D ops take ----
void check_sequence(const std::string& name, const char* cls, const Shape& s) {
  LOCKSTEP_CHECK(s.rank() == 3, "layer '", name, "' (", cls, ") needs inputs of shape (batch, steps, channels), got ",
                 s.str(), "; add a Reshape layer before it (channels_last is the only data_format)");
}

Tensor as_image(const Tensor& x) { return reshape(x, Shape{x.dim(0), 1, x.dim(1), x.dim(2)}); }
Tensor as_sequence(const Tensor& y) { return reshape(y, Shape{y.dim(0), y.dim(2), y.dim(3)}); }

// What a 2D layer (Size = Pair, input (N, H, W, C)) and its 1D form (Size = std::int64_t, input
// (N, steps, C), run as the (N, 1, steps, C) image) differ in; each layer's body is written once
// over it. at(size, i) is the size along spatial dimension i; image(size) the size as the 2D ops
// take it ((1, v) for a 1D one: the image's one row).
template <typename Size>
struct SpatialDims;

template <>
struct SpatialDims<Pair> {
  static constexpr int kDims = 2;
  static constexpr const char* kConv = "Conv2D";
  static constexpr const char* kDepthwise = "DepthwiseConv2D";
  static constexpr const char* kSeparable = "SeparableConv2D";
  static constexpr const char* kTranspose = "Conv2DTranspose";
  static constexpr const char* kMaxPooling = "MaxPooling2D";
  static constexpr const char* kAveragePooling = "AveragePooling2D";
  static constexpr bool kCausal = false;  // Keras' padding "causal" is Conv1D's alone
  // The spatial dimensions as messages name them, and what an input with an empty one lacks.
  static constexpr std::array<const char*, 2> kLengths = {"rows", "columns"};
  static constexpr const char* kEmpty = "has an empty dimension";

  static std::int64_t at(const Pair& p, int i) { return p[static_cast<std::size_t>(i)]; }
  static Pair image(const Pair& p) { return p; }
  static Pair image_size(const Shape& s) { return {s[1], s[2]}; }
  static Padding2d image_padding(const std::array<Pair, 2>& p) {
    return {p[0][0], p[0][1], p[1][0], p[1][1]};
  }
  static void check_input(const std::string& name, const char* cls, const Shape& s) {
    check_image(name, cls, s);
  }
  static Tensor to_image(const Tensor& x) { return x; }
  static Tensor from_image(const Tensor& y) { return y; }
  static Tensor image_kernel(const Tensor& k) { return k; }
  // At call the 2D layers check the rank only: the ops' messages name the image as given.
  static void check_call(const Layer& layer, const char* cls, const Shape& s) {
    check_image(layer.name(), cls, s);
  }
};

template <>
struct SpatialDims<std::int64_t> {
  static constexpr int kDims = 1;
  static constexpr const char* kConv = "Conv1D";
  static constexpr const char* kDepthwise = "DepthwiseConv1D";
  static constexpr const char* kSeparable = "SeparableConv1D";
  static constexpr const char* kTranspose = "Conv1DTranspose";
  static constexpr const char* kMaxPooling = "MaxPooling1D";
  static constexpr const char* kAveragePooling = "AveragePooling1D";
  static constexpr bool kCausal = true;
  static constexpr std::array<const char*, 1> kLengths = {"steps"};
  static constexpr const char* kEmpty = "has no steps";

  static std::int64_t at(std::int64_t v, int) { return v; }
  static Pair image(std::int64_t v) { return {1, v}; }
  static Pair image_size(const Shape& s) { return {1, s[1]}; }
  static Padding2d image_padding(const std::array<Pair, 1>& p) { return {.left = p[0][0], .right = p[0][1]}; }
  static void check_input(const std::string& name, const char* cls, const Shape& s) {
    check_sequence(name, cls, s);
  }
  static Tensor to_image(const Tensor& x) { return as_image(x); }
  static Tensor from_image(const Tensor& y) { return as_sequence(y); }
  // A 1D kernel (k, a, b) is the image kernel (1, k, a, b), the same memory.
  static Tensor image_kernel(const Tensor& k) { return reshape(k, Shape{1, k.dim(0), k.dim(1), k.dim(2)}); }
  // At call the 1D layers check the window too: the ops' messages would name the (N, 1, steps, C) view.
  static void check_call(const Layer& layer, const char*, const Shape& s) {
    (void)layer.compute_output_shape(s);
  }
};

// A weight's shape: the window's spatial sizes, then `a` and `b` (Keras' (kh, kw, a, b), (k, a, b)).
template <typename Size>
Shape window_shape(const Size& window, std::int64_t a, std::int64_t b) {
  std::vector<std::int64_t> dims;
  for (int i = 0; i < SpatialDims<Size>::kDims; ++i) dims.push_back(SpatialDims<Size>::at(window, i));
  dims.push_back(a);
  dims.push_back(b);
  return Shape(std::move(dims));
}

// A size as messages name it: "(3, 3)" for a pair, "3" for a 1D layer's.
std::string size_str(const Pair& p) { return pair_str(p); }
std::string size_str(std::int64_t v) { return std::to_string(v); }

// The output of a window over the input s's spatial dimensions, `channels` deep.
template <typename Size>
Shape window_output_shape(const std::string& name, const char* cls, const Shape& s, PaddingMode mode,
                          const Size& window, const Size& strides, const Size& dilation,
                          std::int64_t channels) {
  using D = SpatialDims<Size>;
  D::check_input(name, cls, s);
  std::vector<std::int64_t> out{s[0]};
  bool fits = true;
  for (int i = 0; i < D::kDims; ++i) {
    out.push_back(output_length(s[i + 1], mode, D::at(window, i), D::at(strides, i), D::at(dilation, i)));
    fits = fits && out.back() != 0;
  }
  LOCKSTEP_CHECK(fits, "layer '", name, "' (", cls, "): the window ", size_str(window), " (dilation ",
                 size_str(dilation), ") does not fit the input ", s.str(), " with padding \"",
                 padding_name(mode), "\"");
  out.push_back(channels);
  return Shape(std::move(out));
}

// The image's padding for a window over the input x: "same"'s per spatial dimension; "causal"'s
// dilation * (kernel - 1) zeros before the steps only.
template <typename Size>
Padding2d padding_for(PaddingMode mode, const Shape& x, const Size& window, const Size& strides,
                      const Size& dilation) {
  using D = SpatialDims<Size>;
  if (mode == PaddingMode::kValid) return {};
  if constexpr (D::kCausal)
    if (mode == PaddingMode::kCausal) return {.left = D::at(dilation, 0) * (D::at(window, 0) - 1)};
  std::array<Pair, D::kDims> p;
  for (int i = 0; i < D::kDims; ++i)
    p[static_cast<std::size_t>(i)] =
        same_padding(x[i + 1], D::at(window, i), D::at(strides, i), D::at(dilation, i));
  return D::image_padding(p);
}

// ReLU in the convolution's own pass over its output, as Dense does; any other activation after it.
template <typename Convolve>
Tensor activated(ActivationKind activation, const Convolve& convolve) {
  if (activation == ActivationKind::kRelu) return convolve(FusedActivation::kRelu);
  return apply_activation(activation, convolve(FusedActivation::kNone));
}

// The depthwise convolution of x (DepthwiseConv's, SeparableConv's first step): the grouped
// convolution of x's image, one group a channel, the kernel (kh, kw, C, m) (1D: (k, C, m)) as the
// grouped (kh, kw, 1, C * m), the same memory; an image out.
template <typename Size>
Tensor depthwise_image(const Tensor& x, const Tensor& kernel, const Tensor& bias, PaddingMode mode,
                       const Size& kernel_size, const Size& strides, const Size& dilation) {
  using D = SpatialDims<Size>;
  const Pair k = D::image(kernel_size);
  const Conv2dOptions o{.strides = D::image(strides),
                        .dilation = D::image(dilation),
                        .padding = padding_for(mode, x.shape(), kernel_size, strides, dilation),
                        .groups = x.dim(x.rank() - 1)};
  const std::int64_t r = kernel.rank();
  const Tensor grouped = reshape(kernel, Shape{k[0], k[1], 1, kernel.dim(r - 2) * kernel.dim(r - 1)});
  return conv2d(D::to_image(x), grouped, bias, o);
}

template <typename Size>
void check_dilation_and_strides(const char* cls, const Size& strides, const Size& dilation) {
  const Size one = uniform_size<Size>(1);
  LOCKSTEP_CHECK(strides == one || dilation == one, cls,
                 ": strides > 1 are not supported together with dilation_rate > 1 (as in Keras), got strides ",
                 size_str(strides), " and dilation_rate ", size_str(dilation));
}

// Every convolution's window: kernel_size, strides and dilation_rate positive, and strides > 1
// not together with dilation_rate > 1.
template <typename Size>
void check_window(const char* cls, const Size& kernel_size, const Size& strides, const Size& dilation) {
  check_positive(cls, "kernel_size", kernel_size);
  check_positive(cls, "strides", strides);
  check_positive(cls, "dilation_rate", dilation);
  check_dilation_and_strides(cls, strides, dilation);
}

// Conv2D's and Conv1D's arguments, checked when the layer is made.
template <typename Size>
void check_conv_options(const char* cls, const ConvOptions<Size>& o) {
  check_positive(cls, "filters", o.filters);
  check_window(cls, o.kernel_size, o.strides, o.dilation_rate);
  LOCKSTEP_CHECK(o.groups > 0 && o.filters % o.groups == 0, cls, ": filters (", o.filters,
                 ") must be a multiple of groups (", o.groups, ")");
  (void)Initializer{o.kernel_initializer}(Shape{0}, 0);
  (void)Initializer{o.bias_initializer}(Shape{0}, 0);
}

// DepthwiseConv2D's and DepthwiseConv1D's arguments.
template <typename Size>
void check_depthwise_options(const char* cls, const DepthwiseConvOptions<Size>& o) {
  check_window(cls, o.kernel_size, o.strides, o.dilation_rate);
  check_positive(cls, "depth_multiplier", o.depth_multiplier);
  (void)Initializer{o.depthwise_initializer}(Shape{0}, 0);
  (void)Initializer{o.bias_initializer}(Shape{0}, 0);
}

// SeparableConv2D's and SeparableConv1D's arguments.
template <typename Size>
void check_separable_options(const char* cls, const SeparableConvOptions<Size>& o) {
  check_positive(cls, "filters", o.filters);
  check_window(cls, o.kernel_size, o.strides, o.dilation_rate);
  check_positive(cls, "depth_multiplier", o.depth_multiplier);
  (void)Initializer{o.depthwise_initializer}(Shape{0}, 0);
  (void)Initializer{o.pointwise_initializer}(Shape{0}, 0);
  (void)Initializer{o.bias_initializer}(Shape{0}, 0);
}

// Conv2DTranspose's and Conv1DTranspose's arguments: Keras' output_padding is at least 0 and
// less than the stride along each dimension (base_conv_transpose.py).
template <typename Size>
void check_transpose_options(const char* cls, const ConvTransposeOptions<Size>& o) {
  check_positive(cls, "filters", o.filters);
  check_window(cls, o.kernel_size, o.strides, o.dilation_rate);
  if (o.output_padding) {
    using D = SpatialDims<Size>;
    bool ok = true;
    for (int i = 0; i < D::kDims; ++i)
      ok = ok && D::at(*o.output_padding, i) >= 0 && D::at(*o.output_padding, i) < D::at(o.strides, i);
    LOCKSTEP_CHECK(ok, cls, ": output_padding must be at least 0 and less than strides (as in Keras), got output_padding ",
                   size_str(*o.output_padding), " and strides ", size_str(o.strides));
  }
  (void)Initializer{o.kernel_initializer}(Shape{0}, 0);
  (void)Initializer{o.bias_initializer}(Shape{0}, 0);
}

// The pooling layers' arguments (strides=None is the pool size).
template <typename Size>
void check_pooling_options(const char* cls, const PoolingOptions<Size>& o) {
  check_positive(cls, "pool_size", o.pool_size);
  if (o.strides) check_positive(cls, "strides", *o.strides);
}

// Keras writes a size as a list, a 1D layer's as a tuple of one, (7,), and takes an int for a
// size alike along every dimension.
nlohmann::json size_to_json(const Pair& p) { return nlohmann::json::array({p[0], p[1]}); }
nlohmann::json size_to_json(std::int64_t v) { return nlohmann::json::array({v}); }
// A size read from `v`, config[key] or a part of it; the layer checks its values.
template <typename Size>
Size size_from(ConfigReader& r, const char* key, const nlohmann::json& v) {
  constexpr bool kPair = std::is_same_v<Size, Pair>;
  const auto whole = [](const nlohmann::json& e) {
    return e.is_number_integer() && !(e.is_number_unsigned() && e.get<std::uint64_t>() > (std::uint64_t{1} << 62));
  };
  if (whole(v)) return uniform_size<Size>(v.get<std::int64_t>());
  if (!v.is_array() || v.size() != (kPair ? 2 : 1) || !std::all_of(v.begin(), v.end(), whole))
    r.fail(key, v, kPair ? "must be an integer or a list of 2 integers" : "must be an integer or a list of 1 integer");
  if constexpr (kPair) {
    return {v[0].get<std::int64_t>(), v[1].get<std::int64_t>()};
  } else {
    return v[0].get<std::int64_t>();
  }
}
template <typename Size>
Size size_from(ConfigReader& r, const char* key) {
  return size_from<Size>(r, key, r.value(key));
}
// A layer's class name: `stem` and its dimensions ("Conv" and Pair: "Conv2D").
template <typename Size>
std::string class_of(const char* stem) {
  return std::string(stem) + (std::is_same_v<Size, Pair> ? "2D" : "1D");
}
}  // namespace

PaddingMode parse_padding(const std::string& name, bool allow_causal) {
  if (name == "valid") return PaddingMode::kValid;
  if (name == "same") return PaddingMode::kSame;
  if (name == "causal" && allow_causal) return PaddingMode::kCausal;
  if (name == "causal") throw ValueError("padding 'causal' is for Conv1D only (as in Keras): expected \"valid\" or \"same\"");
  throw ValueError("unknown padding '" + name + "': expected \"valid\"" + (allow_causal ? ", \"same\" or \"causal\"" : " or \"same\""));
}
std::string padding_name(PaddingMode mode) {
  return mode == PaddingMode::kValid ? "valid" : mode == PaddingMode::kSame ? "same" : "causal";
}

// ---- Conv2D, Conv1D ----
template <typename Size>
ConvLayer<Size>::ConvLayer(const ConvOptions<Size>& o)
    : Layer(o.name),
      options_(o),
      padding_(parse_padding(o.padding, SpatialDims<Size>::kCausal)),
      activation_(parse_activation(o.activation)) {
  check_conv_options(SpatialDims<Size>::kConv, o);
}

template <typename Size>
std::string ConvLayer<Size>::class_name() const {
  return SpatialDims<Size>::kConv;
}

template <typename Size>
Shape ConvLayer<Size>::compute_output_shape(const Shape& s) const {
  return window_output_shape(name(), SpatialDims<Size>::kConv, s, padding_, options_.kernel_size,
                             options_.strides, options_.dilation_rate, options_.filters);
}

template <typename Size>
void ConvLayer<Size>::build_impl(const Shape& s, std::uint64_t seed) {
  using D = SpatialDims<Size>;
  (void)compute_output_shape(s);
  const std::int64_t c = s[D::kDims + 1];
  LOCKSTEP_CHECK(c > 0 && c % options_.groups == 0, "layer '", name(), "' (", D::kConv,
                 "): the input's channels (", c, ") must be a positive multiple of groups (", options_.groups,
                 ")");
  kernel_ = add_weight("kernel", window_shape(options_.kernel_size, c / options_.groups, options_.filters),
                       Initializer{options_.kernel_initializer}, mix_seed(seed, 1));
  if (options_.use_bias)
    bias_ = add_weight("bias", Shape{options_.filters}, Initializer{options_.bias_initializer}, mix_seed(seed, 2));
}

template <typename Size>
Conv2dOptions ConvLayer<Size>::geometry(const Shape& x) const {
  using D = SpatialDims<Size>;
  return {.strides = D::image(options_.strides),
          .dilation = D::image(options_.dilation_rate),
          .padding = padding_for(padding_, x, options_.kernel_size, options_.strides, options_.dilation_rate),
          .groups = options_.groups};
}

template <typename Size>
Tensor ConvLayer<Size>::convolve(const Tensor& x, FusedActivation act, bool training) const {
  using D = SpatialDims<Size>;
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (", D::kConv, ") is called before it was built");
  D::check_call(*this, D::kConv, x.shape());
  Conv2dOptions o = geometry(x.shape());
  o.activation = act;
  o.winograd = training;  // inference keeps the direct kernel's numbers
  const Tensor bias = bias_.defined() ? autocast(bias_.value()) : Tensor();
  return D::from_image(conv2d(D::to_image(autocast(x)), D::image_kernel(autocast(kernel_.value())), bias, o));
}

template <typename Size>
Tensor ConvLayer<Size>::call_logits(const Tensor& x, const CallContext& ctx) const {
  return convolve(x, FusedActivation::kNone, ctx.training);
}

template <typename Size>
Tensor ConvLayer<Size>::call(const Tensor& x, const CallContext& ctx) const {
  return activated(activation_, [&](FusedActivation a) { return convolve(x, a, ctx.training); });
}

// Conv2D's only: conv2d_max_pool2d has no 1D rows.
template <typename Size>
Tensor ConvLayer<Size>::call_then(const Layer& next, const Tensor& x, const CallContext& ctx) const {
  if constexpr (std::is_same_v<Size, Pair>) {
    const auto* pool = dynamic_cast<const Pooling2DLayer*>(&next);
    if (pool == nullptr || !pool->is_max() ||
        (activation_ != ActivationKind::kRelu && activation_ != ActivationKind::kLinear))
      return Tensor();
    if (!built() || x.rank() != 4) return Tensor();  // call() says what is wrong
    Conv2dOptions o = geometry(x.shape());
    o.activation = activation_ == ActivationKind::kRelu ? FusedActivation::kRelu : FusedActivation::kNone;
    const Tensor in = autocast(x), kernel = autocast(kernel_.value());
    const Tensor bias = bias_.defined() ? autocast(bias_.value()) : Tensor();
    const Pool2dOptions po = pool->geometry(compute_output_shape(x.shape()));
    if (!conv2d_max_pool2d_supported(in, kernel, bias, o, po)) return Tensor();
    return conv2d_max_pool2d(in, kernel, bias, o, po);
  }
  return Layer::call_then(next, x, ctx);
}

// ---- DepthwiseConv2D, DepthwiseConv1D ----
template <typename Size>
DepthwiseConvLayer<Size>::DepthwiseConvLayer(const DepthwiseConvOptions<Size>& o)
    : Layer(o.name),
      options_(o),
      padding_(parse_padding(o.padding)),
      activation_(parse_activation(o.activation)) {
  check_depthwise_options(SpatialDims<Size>::kDepthwise, o);
}

template <typename Size>
std::string DepthwiseConvLayer<Size>::class_name() const {
  return SpatialDims<Size>::kDepthwise;
}

template <typename Size>
Shape DepthwiseConvLayer<Size>::compute_output_shape(const Shape& s) const {
  using D = SpatialDims<Size>;
  D::check_input(name(), D::kDepthwise, s);
  const std::int64_t c = s[D::kDims + 1];
  return window_output_shape(name(), D::kDepthwise, s, padding_, options_.kernel_size, options_.strides,
                             options_.dilation_rate, c < 0 ? -1 : c * options_.depth_multiplier);
}

template <typename Size>
void DepthwiseConvLayer<Size>::build_impl(const Shape& s, std::uint64_t seed) {
  using D = SpatialDims<Size>;
  (void)compute_output_shape(s);
  const std::int64_t c = s[D::kDims + 1];
  LOCKSTEP_CHECK(c > 0, "layer '", name(), "' (", D::kDepthwise, "): input ", s.str(), " has no channels");
  kernel_ = add_weight("kernel", window_shape(options_.kernel_size, c, options_.depth_multiplier),
                       Initializer{options_.depthwise_initializer}, mix_seed(seed, 1));
  if (options_.use_bias)
    bias_ = add_weight("bias", Shape{c * options_.depth_multiplier}, Initializer{options_.bias_initializer},
                       mix_seed(seed, 2));
}

template <typename Size>
Tensor DepthwiseConvLayer<Size>::call(const Tensor& x, const CallContext&) const {
  using D = SpatialDims<Size>;
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (", D::kDepthwise, ") is called before it was built");
  D::check_call(*this, D::kDepthwise, x.shape());
  const Tensor bias = bias_.defined() ? autocast(bias_.value()) : Tensor();
  const Tensor y = depthwise_image(autocast(x), autocast(kernel_.value()), bias, padding_,
                                   options_.kernel_size, options_.strides, options_.dilation_rate);
  return apply_activation(activation_, D::from_image(y));
}

// ---- SeparableConv2D, SeparableConv1D ----
template <typename Size>
SeparableConvLayer<Size>::SeparableConvLayer(const SeparableConvOptions<Size>& o)
    : Layer(o.name),
      options_(o),
      padding_(parse_padding(o.padding)),
      activation_(parse_activation(o.activation)) {
  check_separable_options(SpatialDims<Size>::kSeparable, o);
}

template <typename Size>
std::string SeparableConvLayer<Size>::class_name() const {
  return SpatialDims<Size>::kSeparable;
}

template <typename Size>
Shape SeparableConvLayer<Size>::compute_output_shape(const Shape& s) const {
  return window_output_shape(name(), SpatialDims<Size>::kSeparable, s, padding_, options_.kernel_size,
                             options_.strides, options_.dilation_rate, options_.filters);
}

template <typename Size>
void SeparableConvLayer<Size>::build_impl(const Shape& s, std::uint64_t seed) {
  using D = SpatialDims<Size>;
  (void)compute_output_shape(s);
  const std::int64_t c = s[D::kDims + 1];
  LOCKSTEP_CHECK(c > 0, "layer '", name(), "' (", D::kSeparable, "): input ", s.str(), " has no channels");
  const std::int64_t m = options_.depth_multiplier;
  depthwise_ = add_weight("depthwise_kernel", window_shape(options_.kernel_size, c, m),
                          Initializer{options_.depthwise_initializer}, mix_seed(seed, 1));
  pointwise_ = add_weight("pointwise_kernel", window_shape(uniform_size<Size>(1), c * m, options_.filters),
                          Initializer{options_.pointwise_initializer}, mix_seed(seed, 2));
  if (options_.use_bias)
    bias_ = add_weight("bias", Shape{options_.filters}, Initializer{options_.bias_initializer}, mix_seed(seed, 3));
}

// The depthwise step (DepthwiseConv's, no bias), then the pointwise 1x1 convolution with the bias.
template <typename Size>
Tensor SeparableConvLayer<Size>::call_logits(const Tensor& x, const CallContext&) const {
  using D = SpatialDims<Size>;
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (", D::kSeparable, ") is called before it was built");
  D::check_call(*this, D::kSeparable, x.shape());
  const Tensor y = depthwise_image(autocast(x), autocast(depthwise_.value()), Tensor(), padding_,
                                   options_.kernel_size, options_.strides, options_.dilation_rate);
  const Tensor bias = bias_.defined() ? autocast(bias_.value()) : Tensor();
  return D::from_image(conv2d(y, D::image_kernel(autocast(pointwise_.value())), bias, {}));
}

template <typename Size>
Tensor SeparableConvLayer<Size>::call(const Tensor& x, const CallContext& ctx) const {
  return apply_activation(activation_, call_logits(x, ctx));
}

// ---- MaxPooling2D, AveragePooling2D, MaxPooling1D, AveragePooling1D ----
template <typename Size>
PoolingLayer<Size>::PoolingLayer(bool max, const PoolingOptions<Size>& o)
    : Layer(o.name), max_(max), options_(o), padding_(parse_padding(o.padding)) {
  check_pooling_options(max ? SpatialDims<Size>::kMaxPooling : SpatialDims<Size>::kAveragePooling, o);
}

template <typename Size>
std::string PoolingLayer<Size>::class_name() const {
  return max_ ? SpatialDims<Size>::kMaxPooling : SpatialDims<Size>::kAveragePooling;
}

template <typename Size>
Shape PoolingLayer<Size>::compute_output_shape(const Shape& s) const {
  using D = SpatialDims<Size>;
  const char* cls = max_ ? D::kMaxPooling : D::kAveragePooling;
  D::check_input(name(), cls, s);
  return window_output_shape(name(), cls, s, padding_, options_.pool_size, strides(), uniform_size<Size>(1),
                             s[D::kDims + 1]);
}

template <typename Size>
Pool2dOptions PoolingLayer<Size>::geometry(const Shape& x) const {
  using D = SpatialDims<Size>;
  return {.pool_size = D::image(options_.pool_size),
          .strides = D::image(strides()),
          .padding = padding_for(padding_, x, options_.pool_size, strides(), uniform_size<Size>(1))};
}

template <typename Size>
Tensor PoolingLayer<Size>::call(const Tensor& x, const CallContext&) const {
  using D = SpatialDims<Size>;
  D::check_call(*this, max_ ? D::kMaxPooling : D::kAveragePooling, x.shape());
  const Pool2dOptions o = geometry(x.shape());
  const Tensor image = D::to_image(autocast(x));
  return D::from_image(max_ ? max_pool2d(image, o) : avg_pool2d(image, o));
}

// ---- GlobalAveragePooling2D, GlobalMaxPooling2D ----
GlobalPooling2DLayer::GlobalPooling2DLayer(bool max, bool keepdims, std::string name)
    : Layer(std::move(name)), max_(max), keepdims_(keepdims) {}

Shape GlobalPooling2DLayer::compute_output_shape(const Shape& s) const {
  check_image(name(), class_name().c_str(), s);
  return keepdims_ ? Shape{s[0], 1, 1, s[3]} : Shape{s[0], s[3]};
}

Tensor GlobalPooling2DLayer::call(const Tensor& x, const CallContext&) const {
  check_image(name(), class_name().c_str(), x.shape());
  LOCKSTEP_CHECK(!max_ || x.dim(1) * x.dim(2) > 0, "layer '", name(), "' (GlobalMaxPooling2D): input ",
                 x.shape().str(), " has no pixels to take the maximum of");
  // (N, H * W, C) reduced over its middle axis: one reduction kernel, any floating dtype.
  const Tensor flat = reshape(autocast(x), Shape{x.dim(0), x.dim(1) * x.dim(2), x.dim(3)});
  const Tensor m = max_ ? reduce_max(flat, 1) : mean(flat, 1);
  return keepdims_ ? reshape(m, Shape{x.dim(0), 1, 1, x.dim(3)}) : m;
}

// ---- ZeroPadding2D ----
ZeroPadding2DLayer::ZeroPadding2DLayer(std::array<Pair, 2> padding, std::string name)
    : Layer(std::move(name)), padding_(padding) {
  for (const Pair& p : padding_)
    LOCKSTEP_CHECK(p[0] >= 0 && p[1] >= 0, "ZeroPadding2D: padding must not be negative, got ((", padding_[0][0],
                   ", ", padding_[0][1], "), (", padding_[1][0], ", ", padding_[1][1], "))");
}

Shape ZeroPadding2DLayer::compute_output_shape(const Shape& s) const {
  check_image(name(), "ZeroPadding2D", s);
  const auto grow = [](std::int64_t d, const Pair& p) { return d < 0 ? d : d + p[0] + p[1]; };
  return Shape{s[0], grow(s[1], padding_[0]), grow(s[2], padding_[1]), s[3]};
}

Tensor ZeroPadding2DLayer::call(const Tensor& x, const CallContext&) const {
  check_image(name(), "ZeroPadding2D", x.shape());
  return zero_pad2d(autocast(x), {padding_[0][0], padding_[0][1], padding_[1][0], padding_[1][1]});
}

// ---- Rescaling ----
RescalingLayer::RescalingLayer(float scale, float offset, std::string name)
    : Layer(std::move(name)), scale_(scale), offset_(offset) {}

Tensor RescalingLayer::call(const Tensor& x, const CallContext&) const {
  // Integer pixels (a model given them as they are, Model::input_of): cast and scaled in one pass
  // under a float32 policy; cast to the compute dtype first otherwise, as Keras does.
  Tensor y;
  if (!is_floating(x.dtype()) && compute_dtype() == DType::kF32) {
    y = cast_and_scale(x, scale_);
  } else {
    const Tensor in = is_floating(x.dtype()) ? x : cast(x, compute_dtype());
    y = scale_ == 1.0f ? in : lockstep::scale(in, scale_);
  }
  return offset_ == 0.0f ? y : add_scalar(y, offset_);
}

// ---- configurations (Keras' get_config / from_config) ----
using nlohmann::json;

namespace {
// Conv2D's and Conv1D's configs: Keras' arguments, the sizes in each one's form.
template <typename Size>
json conv_config(json c, const ConvOptions<Size>& o, ActivationKind activation) {
  c.update({{"filters", o.filters}, {"kernel_size", size_to_json(o.kernel_size)}, {"strides", size_to_json(o.strides)},
            {"padding", o.padding}, {"dilation_rate", size_to_json(o.dilation_rate)}, {"groups", o.groups},
            {"activation", activation_name(activation)}, {"use_bias", o.use_bias},
            {"kernel_initializer", o.kernel_initializer}, {"bias_initializer", o.bias_initializer}});
  return c;
}
// The arguments every convolution's config has, read into its options `o`.
template <typename Size, typename Options>
Options& window_options(ConfigReader& r, Options& o) {
  o.kernel_size = size_from<Size>(r, "kernel_size");
  o.strides = size_from<Size>(r, "strides");
  o.padding = r.string("padding");
  o.dilation_rate = size_from<Size>(r, "dilation_rate");
  o.activation = r.string("activation");
  o.use_bias = r.boolean("use_bias");
  o.bias_initializer = r.string("bias_initializer");
  o.name = r.string("name");
  return o;
}
template <typename Size>
ConvOptions<Size> conv_options(const json& c) {
  auto r = layer_config_reader(class_of<Size>("Conv"), c);
  ConvOptions<Size> o;
  o.filters = r.integer("filters");
  o.groups = r.integer("groups");
  o.kernel_initializer = r.string("kernel_initializer");
  return window_options<Size>(r, o);
}

// DepthwiseConv2D's and DepthwiseConv1D's configs.
template <typename Size>
json depthwise_config(json c, const DepthwiseConvOptions<Size>& o, ActivationKind activation) {
  c.update({{"kernel_size", size_to_json(o.kernel_size)}, {"strides", size_to_json(o.strides)},
            {"padding", o.padding}, {"depth_multiplier", o.depth_multiplier},
            {"dilation_rate", size_to_json(o.dilation_rate)}, {"activation", activation_name(activation)},
            {"use_bias", o.use_bias}, {"depthwise_initializer", o.depthwise_initializer},
            {"bias_initializer", o.bias_initializer}});
  return c;
}
template <typename Size>
DepthwiseConvOptions<Size> depthwise_options(const json& c) {
  auto r = layer_config_reader(class_of<Size>("DepthwiseConv"), c);
  DepthwiseConvOptions<Size> o;
  o.depth_multiplier = r.integer("depth_multiplier");
  o.depthwise_initializer = r.string("depthwise_initializer");
  return window_options<Size>(r, o);
}

// SeparableConv2D's and SeparableConv1D's configs.
template <typename Size>
json separable_config(json c, const SeparableConvOptions<Size>& o, ActivationKind activation) {
  c.update({{"filters", o.filters}, {"kernel_size", size_to_json(o.kernel_size)}, {"strides", size_to_json(o.strides)},
            {"padding", o.padding}, {"depth_multiplier", o.depth_multiplier},
            {"dilation_rate", size_to_json(o.dilation_rate)}, {"activation", activation_name(activation)},
            {"use_bias", o.use_bias}, {"depthwise_initializer", o.depthwise_initializer},
            {"pointwise_initializer", o.pointwise_initializer}, {"bias_initializer", o.bias_initializer}});
  return c;
}
template <typename Size>
SeparableConvOptions<Size> separable_options(const json& c) {
  auto r = layer_config_reader(class_of<Size>("SeparableConv"), c);
  SeparableConvOptions<Size> o;
  o.filters = r.integer("filters");
  o.depth_multiplier = r.integer("depth_multiplier");
  o.depthwise_initializer = r.string("depthwise_initializer");
  o.pointwise_initializer = r.string("pointwise_initializer");
  return window_options<Size>(r, o);
}

// Conv2DTranspose's and Conv1DTranspose's configs (output_padding null: Keras' None).
template <typename Size>
json transpose_config(json c, const ConvTransposeOptions<Size>& o, ActivationKind activation) {
  c.update({{"filters", o.filters},
            {"kernel_size", size_to_json(o.kernel_size)},
            {"strides", size_to_json(o.strides)},
            {"padding", o.padding},
            {"output_padding", o.output_padding ? size_to_json(*o.output_padding) : json(nullptr)},
            {"dilation_rate", size_to_json(o.dilation_rate)},
            {"activation", activation_name(activation)},
            {"use_bias", o.use_bias},
            {"kernel_initializer", o.kernel_initializer},
            {"bias_initializer", o.bias_initializer}});
  return c;
}
template <typename Size>
ConvTransposeOptions<Size> transpose_options(const json& c) {
  auto r = layer_config_reader(class_of<Size>("Conv") + "Transpose", c);
  ConvTransposeOptions<Size> o;
  o.filters = r.integer("filters");
  if (r.raw("output_padding")) o.output_padding = size_from<Size>(r, "output_padding");
  o.kernel_initializer = r.string("kernel_initializer");
  return window_options<Size>(r, o);
}

// The pooling layers' configs; strides as the layer uses them (Keras writes its strides=None so).
template <typename Size>
json pooling_config(json c, const PoolingOptions<Size>& o, const Size& strides) {
  c.update({{"pool_size", size_to_json(o.pool_size)}, {"strides", size_to_json(strides)}, {"padding", o.padding}});
  return c;
}
template <typename Size>
PoolingOptions<Size> pooling_options(bool max, const json& c) {
  auto r = layer_config_reader(class_of<Size>(max ? "MaxPooling" : "AveragePooling"), c);
  return {size_from<Size>(r, "pool_size"),
          r.raw("strides") ? std::optional<Size>(size_from<Size>(r, "strides")) : std::nullopt, r.string("padding"),
          r.string("name")};
}
}  // namespace

template <typename Size>
json ConvLayer<Size>::get_config() const {
  return conv_config(Layer::get_config(), options_, activation_);
}
template <typename Size>
LayerPtr ConvLayer<Size>::from_config(const json& c) {
  return std::make_shared<ConvLayer<Size>>(conv_options<Size>(c));
}

template <typename Size>
json DepthwiseConvLayer<Size>::get_config() const {
  return depthwise_config(Layer::get_config(), options_, activation_);
}
template <typename Size>
LayerPtr DepthwiseConvLayer<Size>::from_config(const json& c) {
  return std::make_shared<DepthwiseConvLayer<Size>>(depthwise_options<Size>(c));
}

template <typename Size>
json SeparableConvLayer<Size>::get_config() const {
  return separable_config(Layer::get_config(), options_, activation_);
}
template <typename Size>
LayerPtr SeparableConvLayer<Size>::from_config(const json& c) {
  return std::make_shared<SeparableConvLayer<Size>>(separable_options<Size>(c));
}

template <typename Size>
json PoolingLayer<Size>::get_config() const {
  return pooling_config(Layer::get_config(), options_, strides());
}
template <typename Size>
LayerPtr PoolingLayer<Size>::from_config(bool max, const json& c) {
  return std::make_shared<PoolingLayer<Size>>(max, pooling_options<Size>(max, c));
}

template <typename Size>
json ConvTransposeLayer<Size>::get_config() const {
  return transpose_config(Layer::get_config(), options_, activation_);
}
template <typename Size>
LayerPtr ConvTransposeLayer<Size>::from_config(const json& c) {
  return std::make_shared<ConvTransposeLayer<Size>>(transpose_options<Size>(c));
}

json GlobalPooling2DLayer::get_config() const {
  json c = Layer::get_config();
  c["keepdims"] = keepdims_;
  return c;
}
LayerPtr GlobalPooling2DLayer::from_config(bool max, const json& c) {
  auto r = layer_config_reader(max ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D", c);
  return std::make_shared<GlobalPooling2DLayer>(max, r.boolean("keepdims", false), r.string("name"));
}

json ZeroPadding2DLayer::get_config() const {
  json c = Layer::get_config();
  c["padding"] = json::array({size_to_json(padding_[0]), size_to_json(padding_[1])});
  return c;
}
LayerPtr ZeroPadding2DLayer::from_config(const json& c) {
  auto r = layer_config_reader("ZeroPadding2D", c);
  const json& p = r.value("padding");
  if (!p.is_array() || p.size() != 2) r.fail("padding", p, "must be ((top, bottom), (left, right))");
  return std::make_shared<ZeroPadding2DLayer>(
      std::array<Pair, 2>{size_from<Pair>(r, "padding", p[0]), size_from<Pair>(r, "padding", p[1])}, r.string("name"));
}

json RescalingLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"scale", scale_}, {"offset", offset_}});
  return c;
}
LayerPtr RescalingLayer::from_config(const json& c) {
  // Keras takes a tensor of scales too (one number only here).
  auto r = layer_config_reader("Rescaling", c);
  return std::make_shared<RescalingLayer>(r.real("scale"), r.real("offset", 0.0f), r.string("name"));
}

// ---- factories ----
LayerPtr Conv2D(std::int64_t filters, Pair kernel_size, const std::string& activation, const std::string& padding,
                Pair strides) {
  return std::make_shared<Conv2DLayer>(Conv2DOptions{.filters = filters,
                                                     .kernel_size = kernel_size,
                                                     .strides = strides,
                                                     .padding = padding,
                                                     .activation = activation});
}
LayerPtr Conv2D(const Conv2DOptions& options) { return std::make_shared<Conv2DLayer>(options); }
LayerPtr DepthwiseConv2D(const DepthwiseConv2DOptions& options) {
  return std::make_shared<DepthwiseConv2DLayer>(options);
}
LayerPtr SeparableConv2D(const SeparableConv2DOptions& options) {
  return std::make_shared<SeparableConv2DLayer>(options);
}
LayerPtr MaxPooling2D(Pair pool_size, std::optional<Pair> strides, const std::string& padding) {
  return std::make_shared<Pooling2DLayer>(true, Pooling2DOptions{pool_size, strides, padding, ""});
}
LayerPtr AveragePooling2D(Pair pool_size, std::optional<Pair> strides, const std::string& padding) {
  return std::make_shared<Pooling2DLayer>(false, Pooling2DOptions{pool_size, strides, padding, ""});
}
LayerPtr GlobalAveragePooling2D(bool keepdims) { return std::make_shared<GlobalPooling2DLayer>(false, keepdims); }
LayerPtr GlobalMaxPooling2D(bool keepdims) { return std::make_shared<GlobalPooling2DLayer>(true, keepdims); }
LayerPtr Conv1D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation,
                const std::string& padding, std::int64_t strides) {
  return std::make_shared<Conv1DLayer>(Conv1DOptions{.filters = filters,
                                                     .kernel_size = kernel_size,
                                                     .strides = strides,
                                                     .padding = padding,
                                                     .activation = activation});
}
LayerPtr Conv1D(const Conv1DOptions& options) { return std::make_shared<Conv1DLayer>(options); }
LayerPtr MaxPooling1D(std::int64_t pool_size, std::optional<std::int64_t> strides, const std::string& padding) {
  return std::make_shared<Pooling1DLayer>(true, Pooling1DOptions{pool_size, strides, padding, ""});
}
LayerPtr AveragePooling1D(std::int64_t pool_size, std::optional<std::int64_t> strides, const std::string& padding) {
  return std::make_shared<Pooling1DLayer>(false, Pooling1DOptions{pool_size, strides, padding, ""});
}
LayerPtr ZeroPadding2D(std::array<Pair, 2> padding) { return std::make_shared<ZeroPadding2DLayer>(padding); }
LayerPtr Rescaling(float scale, float offset) { return std::make_shared<RescalingLayer>(scale, offset); }

// ---- the decoder side: Conv2DTranspose / Conv1DTranspose, UpSampling2D / UpSampling1D, Cropping2D,
// ZeroPadding1D ----
namespace {
// Keras' transposed output length along one dimension (backend_utils.py's
// _get_output_shape_given_tf_padding); an unknown -1 stays unknown.
std::int64_t transposed_length(std::int64_t in, PaddingMode mode, std::int64_t kernel, std::int64_t stride,
                               std::int64_t dilation, std::optional<std::int64_t> output_padding) {
  if (in < 0) return -1;
  const std::int64_t k = (kernel - 1) * dilation + 1;
  if (mode == PaddingMode::kValid)
    return (in - 1) * stride + k + output_padding.value_or(std::max(k, stride) - k);
  return output_padding ? (in - 1) * stride + k % 2 + *output_padding : in * stride;
}

// Keras' pair-of-pairs arguments (Cropping2D's cropping): an int for all four, a pair for (symmetric
// height, symmetric width), or ((top, bottom), (left, right)).
std::array<Pair, 2> pairs_from(ConfigReader& r, const char* key) {
  const json& j = r.value(key);
  if (j.is_number_integer()) return {size_from<Pair>(r, key, j), size_from<Pair>(r, key, j)};
  if (!j.is_array() || j.size() != 2) r.fail(key, j, "must be an integer, or ((top, bottom), (left, right))");
  return {size_from<Pair>(r, key, j[0]), size_from<Pair>(r, key, j[1])};
}

// Rows gathered from x's (rows, C) view, `per` output rows per example: recorded gather_rows,
// whose gradient scatter-adds into x's rows (a repeated row's gradients add up).
Tensor gather_image_rows(const Tensor& x, const Tensor& index, const Shape& out) {
  const std::int64_t c = x.dim(x.rank() - 1);
  const Tensor rows = gather_rows(reshape(x, Shape{x.numel() / std::max<std::int64_t>(c, 1), c}), index);
  return reshape(rows, out);
}
}  // namespace

// ---- Conv2DTranspose, Conv1DTranspose ----
template <typename Size>
ConvTransposeLayer<Size>::ConvTransposeLayer(const ConvTransposeOptions<Size>& o)
    : Layer(o.name),
      options_(o),
      padding_(parse_padding(o.padding)),
      activation_(parse_activation(o.activation)) {
  check_transpose_options(SpatialDims<Size>::kTranspose, o);
}

template <typename Size>
std::string ConvTransposeLayer<Size>::class_name() const {
  return SpatialDims<Size>::kTranspose;
}

template <typename Size>
Shape ConvTransposeLayer<Size>::compute_output_shape(const Shape& s) const {
  using D = SpatialDims<Size>;
  D::check_input(name(), D::kTranspose, s);
  const auto& o = options_;
  std::vector<std::int64_t> out{s[0]};
  for (int i = 0; i < D::kDims; ++i) {
    const std::int64_t in = s[i + 1], stride = D::at(o.strides, i);
    const std::optional<std::int64_t> op =
        o.output_padding ? std::optional<std::int64_t>(D::at(*o.output_padding, i)) : std::nullopt;
    const std::int64_t len =
        transposed_length(in, padding_, D::at(o.kernel_size, i), stride, D::at(o.dilation_rate, i), op);
    // "same" with an output_padding can ask for an output whose "same" convolution does not come
    // back to the input (an even kernel with output_padding 0: (in - 1) * stride rows, which
    // tf.nn.conv2d_transpose refuses as Keras' TensorFlow backend calls it).
    LOCKSTEP_CHECK(in < 0 || padding_ == PaddingMode::kValid || (len + stride - 1) / stride == in, "layer '",
                   name(), "' (", D::kTranspose, "): padding \"same\" with output_padding ",
                   size_str(*o.output_padding), " gives ", len, " ", D::kLengths[static_cast<std::size_t>(i)],
                   " for ", in, " input ones, which a \"same\" convolution with strides ",
                   size_str(o.strides),
                   " does not map back to them (TensorFlow refuses it too); use another output_padding");
    LOCKSTEP_CHECK(len != 0, "layer '", name(), "' (", D::kTranspose, "): input ", s.str(), " ", D::kEmpty);
    out.push_back(len);
  }
  out.push_back(o.filters);
  return Shape(std::move(out));
}

template <typename Size>
void ConvTransposeLayer<Size>::build_impl(const Shape& s, std::uint64_t seed) {
  using D = SpatialDims<Size>;
  (void)compute_output_shape(s);
  const std::int64_t c = s[D::kDims + 1];
  LOCKSTEP_CHECK(c > 0, "layer '", name(), "' (", D::kTranspose, "): input ", s.str(), " has no channels");
  kernel_ = add_weight("kernel", window_shape(options_.kernel_size, options_.filters, c),
                       Initializer{options_.kernel_initializer}, mix_seed(seed, 1));
  if (options_.use_bias)
    bias_ = add_weight("bias", Shape{options_.filters}, Initializer{options_.bias_initializer},
                       mix_seed(seed, 2));
}

template <typename Size>
Tensor ConvTransposeLayer<Size>::call(const Tensor& x, const CallContext&) const {
  using D = SpatialDims<Size>;
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (", D::kTranspose, ") is called before it was built");
  const Shape out = compute_output_shape(x.shape());
  // The convolution from the output back to x: "same"'s padding is TensorFlow's for that
  // convolution over the output (tf.nn.conv2d_transpose's), "valid" none.
  const Conv2dOptions o{
      .strides = D::image(options_.strides),
      .dilation = D::image(options_.dilation_rate),
      .padding = padding_for(padding_, out, options_.kernel_size, options_.strides, options_.dilation_rate)};
  Tensor y = D::from_image(conv2d_transpose(
      D::to_image(autocast(x)), D::image_kernel(autocast(kernel_.value())), D::image_size(out), o));
  if (bias_.defined()) y = add(y, autocast(bias_.value()));
  return apply_activation(activation_, y);
}

// UpSampling2D
UpSampling2DLayer::UpSampling2DLayer(Pair size, std::string interpolation, std::string name)
    : Layer(std::move(name)), size_(size), interpolation_(std::move(interpolation)) {
  check_positive("UpSampling2D", "size", size_);
  // Keras lower-cases the name (up_sampling2d.py) and hands any but "nearest" to ops.image.resize.
  std::transform(interpolation_.begin(), interpolation_.end(), interpolation_.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  (void)parse_interpolation(interpolation_, "UpSampling2D");
}

Shape UpSampling2DLayer::compute_output_shape(const Shape& s) const {
  check_image(name(), "UpSampling2D", s);
  const auto grow = [](std::int64_t d, std::int64_t f) { return d < 0 ? d : d * f; };
  return Shape{s[0], grow(s[1], size_[0]), grow(s[2], size_[1]), s[3]};
}

// Keras' "nearest" is ops.repeat, which is resize's nearest for a whole factor (input
// floor((i + 0.5) / size) = floor(i / size)); the others are ops.image.resize to size times the image.
Tensor UpSampling2DLayer::call(const Tensor& x, const CallContext&) const {
  check_image(name(), "UpSampling2D", x.shape());
  return resize_images(autocast(x), x.dim(1) * size_[0], x.dim(2) * size_[1],
                       parse_interpolation(interpolation_, "UpSampling2D"));
}

// UpSampling1D
UpSampling1DLayer::UpSampling1DLayer(std::int64_t size, std::string name)
    : Layer(std::move(name)), size_(size) {
  check_positive("UpSampling1D", "size", size_);
}

Shape UpSampling1DLayer::compute_output_shape(const Shape& s) const {
  check_sequence(name(), "UpSampling1D", s);
  return Shape{s[0], s[1] < 0 ? s[1] : s[1] * size_, s[2]};
}

Tensor UpSampling1DLayer::call(const Tensor& x_in, const CallContext&) const {
  check_sequence(name(), "UpSampling1D", x_in.shape());
  const Tensor x = autocast(x_in);
  const std::int64_t n = x.dim(0), steps = x.dim(1), c = x.dim(2), f = size_, out = steps * f;
  if (x.numel() == 0) return reshape(x, Shape{n, out, c});  // as UpSampling2D's
  const Tensor index =
      device_constant({"UpSampling1D rows: steps, size", {steps, f}}, n, [=](std::int64_t examples) {
        std::vector<std::int64_t> v(static_cast<std::size_t>(examples * out));
        std::size_t r = 0;
        for (std::int64_t b = 0; b < examples; ++b)
          for (std::int64_t t = 0; t < out; ++t) v[r++] = b * steps + t / f;
        return Tensor::from_vector(v, {examples, out});
      }).reshape({n * out});
  return gather_image_rows(x, index, Shape{n, out, c});
}

namespace {
// The (oh, ow) pixels of the image x (N, H, W, C) from row `top` and column `left` on (Cropping2D's,
// and Cropping1D's on the (N, 1, steps, C) view).
Tensor cropped(const Tensor& x, std::int64_t top, std::int64_t left, std::int64_t oh, std::int64_t ow) {
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2);
  if (x.numel() == 0) return reshape(x, Shape{n, oh, ow, x.dim(3)});  // as UpSampling2D's
  const Tensor index =
      device_constant({"Cropping2D rows: h, w, oh, ow, top, left", {h, w, oh, ow, top, left}}, n,
                      [=](std::int64_t examples) {
                        std::vector<std::int64_t> v(static_cast<std::size_t>(examples * oh * ow));
                        std::size_t r = 0;
                        for (std::int64_t b = 0; b < examples; ++b)
                          for (std::int64_t i = 0; i < oh; ++i)
                            for (std::int64_t j = 0; j < ow; ++j) v[r++] = (b * h + i + top) * w + j + left;
                        return Tensor::from_vector(v, {examples, oh * ow});
                      })
          .reshape({n * oh * ow});
  return gather_image_rows(x, index, Shape{n, oh, ow, x.dim(3)});
}
}  // namespace

// Cropping2D
Cropping2DLayer::Cropping2DLayer(std::array<Pair, 2> cropping, std::string name)
    : Layer(std::move(name)), cropping_(cropping) {
  for (const Pair& p : cropping_)
    LOCKSTEP_CHECK(p[0] >= 0 && p[1] >= 0, "Cropping2D: cropping must not be negative, got ((",
                   cropping_[0][0], ", ", cropping_[0][1], "), (", cropping_[1][0], ", ", cropping_[1][1],
                   "))");
}

Shape Cropping2DLayer::compute_output_shape(const Shape& s) const {
  check_image(name(), "Cropping2D", s);
  std::int64_t len[2];
  for (int i = 0; i < 2; ++i) {
    const Pair& p = cropping_[static_cast<std::size_t>(i)];
    len[i] = s[i + 1] < 0 ? -1 : s[i + 1] - p[0] - p[1];
    LOCKSTEP_CHECK(s[i + 1] < 0 || len[i] > 0, "layer '", name(), "' (Cropping2D): cropping ", pair_str(p),
                   " leaves nothing of the input's ", s[i + 1], " ", i == 0 ? "rows" : "columns", " (input ",
                   s.str(), ")");
  }
  return Shape{s[0], len[0], len[1], s[3]};
}

Tensor Cropping2DLayer::call(const Tensor& x_in, const CallContext&) const {
  const Shape out = compute_output_shape(x_in.shape());
  return cropped(autocast(x_in), cropping_[0][0], cropping_[1][0], out[1], out[2]);
}

// ZeroPadding1D
ZeroPadding1DLayer::ZeroPadding1DLayer(Pair padding, std::string name)
    : Layer(std::move(name)), padding_(padding) {
  LOCKSTEP_CHECK(padding_[0] >= 0 && padding_[1] >= 0, "ZeroPadding1D: padding must not be negative, got ",
                 pair_str(padding_));
}

Shape ZeroPadding1DLayer::compute_output_shape(const Shape& s) const {
  check_sequence(name(), "ZeroPadding1D", s);
  return Shape{s[0], s[1] < 0 ? s[1] : s[1] + padding_[0] + padding_[1], s[2]};
}

Tensor ZeroPadding1DLayer::call(const Tensor& x, const CallContext&) const {
  check_sequence(name(), "ZeroPadding1D", x.shape());
  return as_sequence(zero_pad2d(as_image(autocast(x)), {.left = padding_[0], .right = padding_[1]}));
}

// configurations (Keras' get_config / from_config)
json UpSampling2DLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"size", size_to_json(size_)}, {"interpolation", interpolation_}});
  return c;
}
LayerPtr UpSampling2DLayer::from_config(const json& c) {
  auto r = layer_config_reader("UpSampling2D", c);
  return std::make_shared<UpSampling2DLayer>(size_from<Pair>(r, "size"), r.string("interpolation", "nearest"),
                                             r.string("name"));
}

json UpSampling1DLayer::get_config() const {
  json c = Layer::get_config();
  c["size"] = size_;
  return c;
}
LayerPtr UpSampling1DLayer::from_config(const json& c) {
  auto r = layer_config_reader("UpSampling1D", c);
  return std::make_shared<UpSampling1DLayer>(r.integer("size"), r.string("name"));
}

json Cropping2DLayer::get_config() const {
  json c = Layer::get_config();
  c["cropping"] = json::array({size_to_json(cropping_[0]), size_to_json(cropping_[1])});
  return c;
}
LayerPtr Cropping2DLayer::from_config(const json& c) {
  auto r = layer_config_reader("Cropping2D", c);
  return std::make_shared<Cropping2DLayer>(pairs_from(r, "cropping"), r.string("name"));
}

json ZeroPadding1DLayer::get_config() const {
  json c = Layer::get_config();
  c["padding"] = size_to_json(padding_);
  return c;
}
LayerPtr ZeroPadding1DLayer::from_config(const json& c) {
  auto r = layer_config_reader("ZeroPadding1D", c);
  return std::make_shared<ZeroPadding1DLayer>(size_from<Pair>(r, "padding"), r.string("name"));
}

LayerPtr Conv2DTranspose(std::int64_t filters, Pair kernel_size, const std::string& activation,
                         const std::string& padding, Pair strides) {
  return std::make_shared<Conv2DTransposeLayer>(Conv2DTransposeOptions{.filters = filters,
                                                                       .kernel_size = kernel_size,
                                                                       .strides = strides,
                                                                       .padding = padding,
                                                                       .activation = activation});
}
LayerPtr Conv2DTranspose(const Conv2DTransposeOptions& options) {
  return std::make_shared<Conv2DTransposeLayer>(options);
}
LayerPtr UpSampling2D(Pair size, const std::string& interpolation) {
  return std::make_shared<UpSampling2DLayer>(size, interpolation);
}
LayerPtr UpSampling1D(std::int64_t size) { return std::make_shared<UpSampling1DLayer>(size); }
LayerPtr Cropping2D(std::array<Pair, 2> cropping) { return std::make_shared<Cropping2DLayer>(cropping); }
LayerPtr ZeroPadding1D(Pair padding) { return std::make_shared<ZeroPadding1DLayer>(padding); }

// Cropping1D
Cropping1DLayer::Cropping1DLayer(Pair cropping, std::string name)
    : Layer(std::move(name)), cropping_(cropping) {
  LOCKSTEP_CHECK(cropping_[0] >= 0 && cropping_[1] >= 0, "Cropping1D: cropping must not be negative, got ",
                 pair_str(cropping_));
}

Shape Cropping1DLayer::compute_output_shape(const Shape& s) const {
  check_sequence(name(), "Cropping1D", s);
  const std::int64_t steps = s[1] < 0 ? -1 : s[1] - cropping_[0] - cropping_[1];
  LOCKSTEP_CHECK(s[1] < 0 || steps > 0, "layer '", name(), "' (Cropping1D): cropping ", pair_str(cropping_),
                 " leaves nothing of the input's ", s[1], " steps (input ", s.str(),
                 "); Keras' cropping must be smaller than the input length");
  return Shape{s[0], steps, s[2]};
}

Tensor Cropping1DLayer::call(const Tensor& x, const CallContext&) const {
  const Shape out = compute_output_shape(x.shape());
  return as_sequence(cropped(as_image(autocast(x)), 0, cropping_[0], 1, out[1]));
}

json Cropping1DLayer::get_config() const {
  json c = Layer::get_config();
  c["cropping"] = size_to_json(cropping_);
  return c;
}
LayerPtr Cropping1DLayer::from_config(const json& c) {
  auto r = layer_config_reader("Cropping1D", c);
  return std::make_shared<Cropping1DLayer>(size_from<Pair>(r, "cropping"), r.string("name"));
}

LayerPtr Conv1DTranspose(std::int64_t filters, std::int64_t kernel_size, const std::string& activation,
                         const std::string& padding, std::int64_t strides) {
  return std::make_shared<Conv1DTransposeLayer>(Conv1DTransposeOptions{.filters = filters,
                                                                       .kernel_size = kernel_size,
                                                                       .strides = strides,
                                                                       .padding = padding,
                                                                       .activation = activation});
}
LayerPtr Conv1DTranspose(const Conv1DTransposeOptions& options) {
  return std::make_shared<Conv1DTransposeLayer>(options);
}
LayerPtr DepthwiseConv1D(const DepthwiseConv1DOptions& options) {
  return std::make_shared<DepthwiseConv1DLayer>(options);
}
LayerPtr SeparableConv1D(const SeparableConv1DOptions& options) {
  return std::make_shared<SeparableConv1DLayer>(options);
}
LayerPtr Cropping1D(Pair cropping) { return std::make_shared<Cropping1DLayer>(cropping); }

template class ConvLayer<Pair>;
template class ConvLayer<std::int64_t>;
template class DepthwiseConvLayer<Pair>;
template class DepthwiseConvLayer<std::int64_t>;
template class SeparableConvLayer<Pair>;
template class SeparableConvLayer<std::int64_t>;
template class PoolingLayer<Pair>;
template class PoolingLayer<std::int64_t>;
template class ConvTransposeLayer<Pair>;
template class ConvTransposeLayer<std::int64_t>;

}  // namespace lockstep::layers
