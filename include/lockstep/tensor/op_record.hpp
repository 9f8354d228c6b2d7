#pragma once
// The hook between ops (tensor layer) and GradientTape (autograd layer): an op asks the
// thread's recorder whether any input is watched and, if so, hands it an OpRecord. The
// gradient function for each OpType lives in the autograd layer, so this layer never
// depends on it.
#include <array>
#include <cstdint>
#include <memory>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

enum class OpType : std::uint8_t {
  kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kScale, kAddScalar, kPowScalar, kClip,
  kNeg, kExp, kLog, kSqrt, kSquare, kAbs, kRelu, kSigmoid, kTanh, kGelu, kSilu, kGatherRows, kConcat,
  kSoftmax, kLogSoftmax, kMatmul, kBatchMatmul, kDense, kSum, kMean, kReduceMax, kReshape, kSlice,
  kCast, kSparseSoftmaxCE, kSoftmaxCE, kDropout, kConv2d, kMaxPool2d, kAvgPool2d,
  kZeroPad2d, kConv2dMaxPool2d, kConv2dTranspose, kWhere, kCustom, kCount
};
const char* op_name(OpType t);

class CustomGradient;

struct OpRecord {
  OpType type = OpType::kCount;
  std::array<Tensor, 3> inputs;  // undefined when the op has fewer
  Tensor output;
  std::array<Tensor, 2> saved;  // what the gradient needs besides inputs/output
  float f0 = 0, f1 = 0;
  std::int64_t i0 = 0, i1 = 0;
  /// A window op's geometry (strides, dilation, padding, groups; see ops_conv.cpp).
  std::array<std::int64_t, 10> geometry{};
  /// kCustom: the gradient its maker supplied.
  std::shared_ptr<const CustomGradient> custom;
};

/// A gradient supplied by the code that computed an op (tf.custom_gradient), for what the
/// tensor layer cannot express itself, such as an all-reduce across replicas inside a layer.
class CustomGradient {
 public:
  virtual ~CustomGradient() = default;
  virtual const char* name() const = 0;
  /// The gradient of each input given the output's gradient g (computed while recording is
  /// paused); needs[i] says whether input i wants one.
  virtual std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g, const std::array<bool, 3>& needs) const = 0;
};

/// Records output = f(inputs) with `gradient` when a tape on this thread watches an input.
void record_custom(const std::array<Tensor, 3>& inputs, const Tensor& output,
                   std::shared_ptr<const CustomGradient> gradient);

class OpRecorder {
 public:
  virtual ~OpRecorder() = default;
  /// True when an op reading these inputs must be recorded.
  virtual bool wants(const Tensor* const* inputs, int n) const = 0;
  virtual void record(const OpRecord& r) = 0;
};

/// The recorder active on this thread, or null.
OpRecorder* current_recorder();
/// Installs `r` on this thread, returning the previous one.
OpRecorder* set_current_recorder(OpRecorder* r);

}  // namespace lockstep
