#pragma once
// Convolution and pooling layers with Keras' names, arguments and defaults, channels_last
// (NHWC; sequences (N, steps, C)) only: Conv2D, DepthwiseConv2D, SeparableConv2D, MaxPooling2D,
// AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, ZeroPadding2D, Rescaling, the decoder
// side's Conv2DTranspose, UpSampling2D and Cropping2D, and the sequence ones Conv1D, MaxPooling1D,
// AveragePooling1D, UpSampling1D, ZeroPadding1D, Conv1DTranspose, DepthwiseConv1D, SeparableConv1D,
// Cropping1D (the 2D ops on an (N, 1, steps, C) view of the sequence).
//
// Each convolution and pooling idea is one class template over its Size: Pair (height, width) for
// the 2D layer on (N, H, W, C), std::int64_t for the 1D one on (N, steps, C) (ConvLayer<Pair> is
// Conv2DLayer, ConvLayer<std::int64_t> is Conv1DLayer). The 1D layer runs the 2D layer's ops on the
// (N, 1, steps, C) view with its kernel's (1, ...) image form, the same memory as Keras' 1D kernel:
// one set of CPU and CUDA kernels and gradients. What differs (the view, the kernel's shape, Keras'
// spelling of a size, Conv1D's "causal" padding, the class name) is written once, in
// src/nn/conv_layers.cpp's SpatialDims.
#include <array>
#include <optional>
#include <type_traits>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

using Pair = std::array<std::int64_t, 2>;

/// Keras' padding argument: "valid" (none) or "same" (output = ceil(input / stride)); Conv1D's
/// "causal" also: dilation * (kernel_size - 1) zeros before the steps only, so that output step t
/// reads no input after step t (output = ceil(input / stride)).
enum class PaddingMode { kValid, kSame, kCausal };
/// "causal" is refused unless allow_causal (Keras takes it for Conv1D only).
PaddingMode parse_padding(const std::string& name, bool allow_causal = false);
std::string padding_name(PaddingMode mode);

/// A window's size, strides or dilation along each spatial dimension: a Pair (height, width) for
/// the 2D layers, one length for the 1D ones; every dimension `v`.
template <typename Size>
constexpr Size uniform_size(std::int64_t v) {
  if constexpr (std::is_same_v<Size, Pair>) return Pair{v, v};
  else return v;
}

/// Conv2D's (Size = Pair) and Conv1D's (Size = std::int64_t) arguments: one list, so that an option
/// is added once for both, as their get_config / from_config are one.
template <typename Size>
struct ConvOptions {
  std::int64_t filters = 0;
  Size kernel_size = uniform_size<Size>(0);
  Size strides = uniform_size<Size>(1);
  std::string padding = "valid";  // Conv1D also "causal"
  Size dilation_rate = uniform_size<Size>(1);
  std::int64_t groups = 1;
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};
using Conv2DOptions = ConvOptions<Pair>;
using Conv1DOptions = ConvOptions<std::int64_t>;

/// Conv2D (Size = Pair): (N, H, W, C) -> (N, OH, OW, filters), kernel (kh, kw, C / groups, filters);
/// Conv1D (Size = std::int64_t): (N, steps, C) -> (N, out_steps, filters), kernel (kernel_size,
/// C / groups, filters), conv2d on the (N, 1, steps, C) view with the kernel (1, kernel_size,
/// C / groups, filters). Kernels as Keras'.
template <typename Size>
class ConvLayer final : public Layer {
 public:
  explicit ConvLayer(const ConvOptions<Size>& options);
  std::string class_name() const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool has_softmax_output() const override { return activation_ == ActivationKind::kSoftmax; }
  Tensor call_logits(const Tensor& x, const CallContext& ctx) const override;
  /// Conv2D with a MaxPooling2D next (and a linear or relu activation): conv2d_max_pool2d.
  Tensor call_then(const Layer& next, const Tensor& x, const CallContext& ctx) const override;
  const ConvOptions<Size>& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Conv2dOptions geometry(const Shape& input_shape) const;
  Tensor convolve(const Tensor& x, FusedActivation activation, bool training) const;
  ConvOptions<Size> options_;
  PaddingMode padding_;
  ActivationKind activation_;
  Variable kernel_, bias_;
};
using Conv2DLayer = ConvLayer<Pair>;
using Conv1DLayer = ConvLayer<std::int64_t>;
extern template class ConvLayer<Pair>;
extern template class ConvLayer<std::int64_t>;

/// DepthwiseConv2D's (Size = Pair) and DepthwiseConv1D's (Size = std::int64_t) arguments.
template <typename Size>
struct DepthwiseConvOptions {
  Size kernel_size = uniform_size<Size>(0);
  Size strides = uniform_size<Size>(1);
  std::string padding = "valid";
  std::int64_t depth_multiplier = 1;
  Size dilation_rate = uniform_size<Size>(1);
  std::string activation = "linear";
  bool use_bias = true;
  std::string depthwise_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};
using DepthwiseConv2DOptions = DepthwiseConvOptions<Pair>;
using DepthwiseConv1DOptions = DepthwiseConvOptions<std::int64_t>;

/// Keras 3's DepthwiseConv2D and DepthwiseConv1D: each channel convolved with its own
/// depth_multiplier filters, output channel c * m + j; kernel (kh, kw, C, m) or (kernel_size, C, m),
/// bias (C * m), as Keras'. The grouped convolution with C groups, its kernel the grouped
/// (kh, kw, 1, C * m) (1D: (1, kernel_size, 1, C * m)), the same memory.
template <typename Size>
class DepthwiseConvLayer final : public Layer {
 public:
  explicit DepthwiseConvLayer(const DepthwiseConvOptions<Size>& options);
  std::string class_name() const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const DepthwiseConvOptions<Size>& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  DepthwiseConvOptions<Size> options_;
  PaddingMode padding_;
  ActivationKind activation_;
  Variable kernel_, bias_;
};
using DepthwiseConv2DLayer = DepthwiseConvLayer<Pair>;
using DepthwiseConv1DLayer = DepthwiseConvLayer<std::int64_t>;
extern template class DepthwiseConvLayer<Pair>;
extern template class DepthwiseConvLayer<std::int64_t>;

/// SeparableConv2D's (Size = Pair) and SeparableConv1D's (Size = std::int64_t) arguments.
template <typename Size>
struct SeparableConvOptions {
  std::int64_t filters = 0;
  Size kernel_size = uniform_size<Size>(0);
  Size strides = uniform_size<Size>(1);
  std::string padding = "valid";
  std::int64_t depth_multiplier = 1;
  Size dilation_rate = uniform_size<Size>(1);
  std::string activation = "linear";
  bool use_bias = true;
  std::string depthwise_initializer = "glorot_uniform";
  std::string pointwise_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};
using SeparableConv2DOptions = SeparableConvOptions<Pair>;
using SeparableConv1DOptions = SeparableConvOptions<std::int64_t>;

/// Keras 3's SeparableConv2D and SeparableConv1D (keras/src/layers/convolutional/separable_conv2d.py,
/// separable_conv1d.py): a depthwise convolution (DepthwiseConv's, no bias) with the strides,
/// padding and dilation, then a 1x1 convolution to `filters`, the bias and the activation. Weights
/// in Keras' order and shapes: depthwise_kernel (kh, kw, C, depth_multiplier), pointwise_kernel
/// (1, 1, C * depth_multiplier, filters), bias (filters); 1D: (kernel_size, C, depth_multiplier)
/// and (1, C * depth_multiplier, filters).
template <typename Size>
class SeparableConvLayer final : public Layer {
 public:
  explicit SeparableConvLayer(const SeparableConvOptions<Size>& options);
  std::string class_name() const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool has_softmax_output() const override { return activation_ == ActivationKind::kSoftmax; }
  Tensor call_logits(const Tensor& x, const CallContext& ctx) const override;
  const SeparableConvOptions<Size>& options() const { return options_; }
  const Variable& depthwise_kernel() const { return depthwise_; }
  const Variable& pointwise_kernel() const { return pointwise_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  SeparableConvOptions<Size> options_;
  PaddingMode padding_;
  ActivationKind activation_;
  Variable depthwise_, pointwise_, bias_;
};
using SeparableConv2DLayer = SeparableConvLayer<Pair>;
using SeparableConv1DLayer = SeparableConvLayer<std::int64_t>;
extern template class SeparableConvLayer<Pair>;
extern template class SeparableConvLayer<std::int64_t>;

/// MaxPooling2D's and AveragePooling2D's (Size = Pair), MaxPooling1D's and AveragePooling1D's
/// (Size = std::int64_t) arguments.
template <typename Size>
struct PoolingOptions {
  Size pool_size = uniform_size<Size>(2);
  /// Keras' strides=None: the pool size.
  std::optional<Size> strides;
  std::string padding = "valid";
  std::string name;
};
using Pooling2DOptions = PoolingOptions<Pair>;
using Pooling1DOptions = PoolingOptions<std::int64_t>;

/// MaxPooling2D (max) and AveragePooling2D; MaxPooling1D and AveragePooling1D over the steps of
/// (N, steps, C), max_pool2d and avg_pool2d on the (N, 1, steps, C) view. Their gradients: the
/// first maximum of a window; "same" averages exclude the padding.
template <typename Size>
class PoolingLayer final : public Layer {
 public:
  PoolingLayer(bool max, const PoolingOptions<Size>& options);
  std::string class_name() const override;
  nlohmann::json get_config() const override;
  /// Max (max) or average pooling; Keras' strides=null is the pool size.
  static LayerPtr from_config(bool max, const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const PoolingOptions<Size>& options() const { return options_; }
  Size strides() const { return options_.strides.value_or(options_.pool_size); }
  bool is_max() const { return max_; }
  /// The op's options for an input of this shape ("same" turned into padding; 1D: of the
  /// (N, 1, steps, C) view).
  Pool2dOptions geometry(const Shape& input_shape) const;

 private:
  bool max_;
  PoolingOptions<Size> options_;
  PaddingMode padding_;
};
using Pooling2DLayer = PoolingLayer<Pair>;
using Pooling1DLayer = PoolingLayer<std::int64_t>;
extern template class PoolingLayer<Pair>;
extern template class PoolingLayer<std::int64_t>;

/// Mean (GlobalAveragePooling2D) or maximum (GlobalMaxPooling2D: max) over height and width:
/// (N, H, W, C) -> (N, C), or (N, 1, 1, C) with keepdims. The maximum is reduce_max over the
/// (N, H * W, C) view, its gradient reduce_max's (see GlobalMaxPooling1DLayer).
class GlobalPooling2DLayer final : public Layer {
 public:
  GlobalPooling2DLayer(bool max, bool keepdims = false, std::string name = "");
  std::string class_name() const override { return max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(bool max, const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool keepdims() const { return keepdims_; }
  bool is_max() const { return max_; }

 private:
  bool max_;
  bool keepdims_;
};

class ZeroPadding2DLayer final : public Layer {
 public:
  /// ((top, bottom), (left, right)); Keras' padding=1 is {{1, 1}, {1, 1}}.
  explicit ZeroPadding2DLayer(std::array<Pair, 2> padding, std::string name = "");
  std::string class_name() const override { return "ZeroPadding2D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const std::array<Pair, 2>& padding() const { return padding_; }

 private:
  std::array<Pair, 2> padding_;
};

/// x * scale + offset (e.g. Rescaling(1 / 255.) for pixels).
class RescalingLayer final : public Layer {
 public:
  explicit RescalingLayer(float scale, float offset = 0.0f, std::string name = "");
  std::string class_name() const override { return "Rescaling"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  float scale() const { return scale_; }
  float offset() const { return offset_; }

 private:
  float scale_, offset_;
};

// ---- the decoder side: Conv2DTranspose, UpSampling2D / UpSampling1D, Cropping2D, ZeroPadding1D ----
/// Conv2DTranspose's (Size = Pair) and Conv1DTranspose's (Size = std::int64_t) arguments, Keras
/// 3's (layers/convolutional/base_conv_transpose.py).
template <typename Size>
struct ConvTransposeOptions {
  std::int64_t filters = 0;
  Size kernel_size = uniform_size<Size>(0);
  Size strides = uniform_size<Size>(1);
  std::string padding = "valid";
  /// Keras' output_padding=None: the output is (in - 1) * stride + max(kernel, stride) ("valid")
  /// or in * stride ("same"); given, (in - 1) * stride + kernel + output_padding ("valid") or
  /// (in - 1) * stride + kernel % 2 + output_padding ("same"), each < its stride.
  std::optional<Size> output_padding;
  Size dilation_rate = uniform_size<Size>(1);
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name;
};
using Conv2DTransposeOptions = ConvTransposeOptions<Pair>;
using Conv1DTransposeOptions = ConvTransposeOptions<std::int64_t>;

/// The transposed convolution (N, H, W, C) -> (N, OH, OW, filters), kernel (kh, kw, filters, C) as
/// Keras' (filters and channels the other way round from Conv2D's): conv2d_transpose, the bias
/// added and the activation applied after it. Keras' TensorFlow backend computes it as
/// tf.nn.conv2d_transpose with that output shape, which is what conv2d_transpose is. Keras 3's
/// Conv1DTranspose (layers/convolutional/conv1d_transpose.py): (N, steps, C) -> (N, out_steps,
/// filters), kernel (kernel_size, filters, C), on the (N, 1, steps, C) view.
template <typename Size>
class ConvTransposeLayer final : public Layer {
 public:
  explicit ConvTransposeLayer(const ConvTransposeOptions<Size>& options);
  std::string class_name() const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const ConvTransposeOptions<Size>& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  ConvTransposeOptions<Size> options_;
  PaddingMode padding_;
  ActivationKind activation_;
  Variable kernel_, bias_;
};
using Conv2DTransposeLayer = ConvTransposeLayer<Pair>;
using Conv1DTransposeLayer = ConvTransposeLayer<std::int64_t>;
extern template class ConvTransposeLayer<Pair>;
extern template class ConvTransposeLayer<std::int64_t>;

/// (N, H, W, C) -> (N, H * size[0], W * size[1], C). interpolation "nearest" repeats each row and
/// column (Keras' ops.repeat: the gradient sums each block); "bilinear", "bicubic", "lanczos3",
/// "lanczos5" and "area" are Keras' ops.image.resize to that size (resize_images,
/// layers/image_resize.hpp); other names are refused, naming these.
class UpSampling2DLayer final : public Layer {
 public:
  explicit UpSampling2DLayer(Pair size = {2, 2}, std::string interpolation = "nearest",
                             std::string name = "");
  std::string class_name() const override { return "UpSampling2D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const Pair& size() const { return size_; }
  const std::string& interpolation() const { return interpolation_; }

 private:
  Pair size_;
  std::string interpolation_;
};

/// Each step repeated `size` times: (N, steps, C) -> (N, steps * size, C).
class UpSampling1DLayer final : public Layer {
 public:
  explicit UpSampling1DLayer(std::int64_t size = 2, std::string name = "");
  std::string class_name() const override { return "UpSampling1D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  std::int64_t size() const { return size_; }

 private:
  std::int64_t size_;
};

/// The image without ((top, bottom), (left, right)) rows and columns (a U-Net's skip connection cut
/// to the decoder's size); the gradient is zero on what was cut.
class Cropping2DLayer final : public Layer {
 public:
  explicit Cropping2DLayer(std::array<Pair, 2> cropping = {Pair{0, 0}, Pair{0, 0}}, std::string name = "");
  std::string class_name() const override { return "Cropping2D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const std::array<Pair, 2>& cropping() const { return cropping_; }

 private:
  std::array<Pair, 2> cropping_;
};

/// (left, right) zero steps around (N, steps, C): zero_pad2d on the (N, 1, steps, C) view.
class ZeroPadding1DLayer final : public Layer {
 public:
  explicit ZeroPadding1DLayer(Pair padding = {1, 1}, std::string name = "");
  std::string class_name() const override { return "ZeroPadding1D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const Pair& padding() const { return padding_; }

 private:
  Pair padding_;
};

LayerPtr Conv2DTranspose(std::int64_t filters, Pair kernel_size, const std::string& activation = "linear",
                         const std::string& padding = "valid", Pair strides = {1, 1});
LayerPtr Conv2DTranspose(const Conv2DTransposeOptions& options);
LayerPtr UpSampling2D(Pair size = {2, 2}, const std::string& interpolation = "nearest");
LayerPtr UpSampling1D(std::int64_t size = 2);
LayerPtr Cropping2D(std::array<Pair, 2> cropping);
LayerPtr ZeroPadding1D(Pair padding = {1, 1});

// Keras-style factories.
LayerPtr Conv2D(std::int64_t filters, Pair kernel_size, const std::string& activation = "linear",
                const std::string& padding = "valid", Pair strides = {1, 1});
LayerPtr Conv2D(const Conv2DOptions& options);
LayerPtr DepthwiseConv2D(const DepthwiseConv2DOptions& options);
LayerPtr SeparableConv2D(const SeparableConv2DOptions& options);
LayerPtr MaxPooling2D(Pair pool_size = {2, 2}, std::optional<Pair> strides = std::nullopt,
                      const std::string& padding = "valid");
LayerPtr AveragePooling2D(Pair pool_size = {2, 2}, std::optional<Pair> strides = std::nullopt,
                          const std::string& padding = "valid");
LayerPtr GlobalAveragePooling2D(bool keepdims = false);
LayerPtr GlobalMaxPooling2D(bool keepdims = false);
LayerPtr Conv1D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "linear",
                const std::string& padding = "valid", std::int64_t strides = 1);
LayerPtr Conv1D(const Conv1DOptions& options);
LayerPtr MaxPooling1D(std::int64_t pool_size = 2, std::optional<std::int64_t> strides = std::nullopt,
                      const std::string& padding = "valid");
LayerPtr AveragePooling1D(std::int64_t pool_size = 2, std::optional<std::int64_t> strides = std::nullopt,
                          const std::string& padding = "valid");
LayerPtr ZeroPadding2D(std::array<Pair, 2> padding = {Pair{1, 1}, Pair{1, 1}});
LayerPtr Rescaling(float scale, float offset = 0.0f);

// ---- the rest of Keras 3's 1D family: Conv1DTranspose, DepthwiseConv1D, SeparableConv1D (above, with
// their 2D layers), Cropping1D. Keras' 1D layers take padding "valid" or "same" only ("causal" is
// Conv1D's alone: standardize_padding without allow_causal).

/// Keras 3's Cropping1D: (N, steps, C) without (start, end) steps; Keras' default (1, 1). The
/// gradient is zero on what was cut.
class Cropping1DLayer final : public Layer {
 public:
  explicit Cropping1DLayer(Pair cropping = {1, 1}, std::string name = "");
  std::string class_name() const override { return "Cropping1D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const Pair& cropping() const { return cropping_; }

 private:
  Pair cropping_;
};

LayerPtr Conv1DTranspose(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "linear",
                         const std::string& padding = "valid", std::int64_t strides = 1);
LayerPtr Conv1DTranspose(const Conv1DTransposeOptions& options);
LayerPtr DepthwiseConv1D(const DepthwiseConv1DOptions& options);
LayerPtr SeparableConv1D(const SeparableConv1DOptions& options);
LayerPtr Cropping1D(Pair cropping = {1, 1});

}  // namespace lockstep::layers
