#pragma once
// Tape-based reverse mode, as tf.GradientTape: while a tape is alive on a thread, every op
// that reads a watched tensor (a trainable Variable's value, a tensor passed to watch(), or
// the output of a recorded op) is recorded; gradient() walks the records backwards.
// A tape belongs to the thread that made it. Nested tapes each record.
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lockstep/autograd/variable.hpp"
#include "lockstep/tensor/op_record.hpp"

namespace lockstep {

class GradientTape final : public OpRecorder {
 public:
  /// A non-persistent tape allows one gradient() call (and frees its records then).
  explicit GradientTape(bool persistent = false);
  ~GradientTape() override;
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);
  void watch(const Variable& v) { watch(v.value()); }
  /// Stops recording (ops after this are not taped); gradient() may still be called.
  void stop_recording();

  /// d(sum of target * output_gradient) / d(source) for each source; an undefined Tensor for a
  /// source the target does not depend on (TensorFlow's None). output_gradient defaults to ones.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_gradient = Tensor());
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               const Tensor& output_gradient = Tensor());

  /// Called with a source's index and its gradient the moment that gradient is final (no op
  /// left to walk reads the source), while the walk goes on: what lets a data-parallel replica
  /// start all-reducing the last layers' gradients during the backward pass of the first ones
  /// (PyTorch DDP's autograd hooks). Sources that take no gradient are reported first, with an
  /// undefined tensor; every index is reported exactly once, before gradient() returns.
  using GradientReady = std::function<void(std::size_t source, const Tensor& gradient)>;
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_gradient, const GradientReady& on_ready);
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               const Tensor& output_gradient, const GradientReady& on_ready);
  /// Several targets, each with its output gradient (undefined: ones): d(sum over k of
  /// sum(targets[k] * output_gradients[k])) / d(source), in one walk of the records (a model's
  /// outputs' losses, each seeded where it is, with no op to add them up).
  std::vector<Tensor> gradient(std::span<const Tensor> targets, const std::vector<Variable>& sources,
                               std::span<const Tensor> output_gradients, const GradientReady& on_ready);

  // OpRecorder
  bool wants(const Tensor* const* inputs, int n) const override;
  void record(const OpRecord& r) override;

 private:
  // gradient()'s one walk of the records from every target back to the sources.
  std::vector<Tensor> walk(std::span<const Tensor> targets, const std::vector<Tensor>& sources,
                           std::span<const Tensor> output_gradients, const GradientReady& on_ready);
  bool persistent_;
  bool recording_ = true;
  bool used_ = false;
  OpRecorder* previous_;
  std::unordered_set<std::uint64_t> watched_;
  std::vector<OpRecord> records_;
};

/// What the tape knows about an op's neighbours, which lets op_backward skip a pass.
/// Max pooling over a ReLU's output (a convnet's conv -> pool) is the case: the ReLU masks the
/// pooling gradient by x > 0, and x > 0 at a window's maximum exactly when the maximum is, so the
/// pooling backward can apply the mask to its (4x smaller) output gradient for free, and the
/// ReLU, when every gradient it receives is masked so, need not make its pass over the tensor.
struct BackwardHints {
  /// inputs[0] is the output of an op that masks its gradient by ReLU (masks_by_relu).
  bool input_from_relu = false;
  /// The output gradient is already zero wherever this op's ReLU would zero it.
  bool output_gradient_masked = false;
};

/// True when r's backward multiplies its output gradient by relu'(output) first: relu, and
/// dense and conv2d with a fused ReLU.
bool masks_by_relu(const OpRecord& r);
/// True when op_backward, told input_from_relu, returns gradients already masked by that ReLU.
bool returns_relu_masked(const OpRecord& r);

/// Computes input gradients of one recorded op given the gradient of its output. Entries for
/// inputs that take no gradient are left undefined; `needs[i]` false lets an op skip input i.
std::array<Tensor, 3> op_backward(const OpRecord& r, const Tensor& grad_output,
                                  const std::array<bool, 3>& needs = {true, true, true},
                                  const BackwardHints& hints = {});

}  // namespace lockstep
