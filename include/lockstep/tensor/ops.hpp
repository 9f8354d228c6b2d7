#pragma once
// Tensor operations as free functions. Each checks its arguments (a ValueError names the op and
// the offending shapes), computes on the current compute context, and, when a GradientTape is
// recording on this thread and an input is watched, records itself for reverse mode.
// Floating-point ops take float32, float16 or bfloat16 tensors (all inputs of one dtype) and
// return that dtype unless stated otherwise; 16-bit floats are computed in float32.
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/core/step_state.hpp"
#include "lockstep/tensor/op_record.hpp"
#include "lockstep/tensor/reduce_op.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

// ---- elementwise, with numpy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
/// a * s
Tensor scale(const Tensor& a, float s);
/// a + s
Tensor add_scalar(const Tensor& a, float s);
/// a ** p
Tensor pow_scalar(const Tensor& a, float p);
/// min(max(a, lo), hi); the gradient passes where lo <= a <= hi.
Tensor clip(const Tensor& a, float lo, float hi);

Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
/// GELU as keras.activations.gelu: x * Phi(x) with the exact erf form (the default), or with
/// `approximate` 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& a, bool approximate = false);
/// SiLU (Swish): x * sigmoid(x).
Tensor silu(const Tensor& a);
/// Softmax / log-softmax along `axis` (numerically stable: max is subtracted first).
Tensor softmax(const Tensor& a, int axis = -1);
Tensor log_softmax(const Tensor& a, int axis = -1);

// ---- comparisons (any dtype, both inputs of one dtype; broadcasting): uint8 0 / 1 ----
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
/// numpy's and TF's where(cond, a, b): a where cond is nonzero, else b, broadcast over all three
/// (a and b of one floating dtype, cond of any dtype). The value not chosen never reaches the
/// result (an infinity there stays out, unlike a * cond + b * (1 - cond)). Recorded: the gradient
/// goes to a where cond holds and to b elsewhere.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- linear algebra ----
/// 2-D matrix product op(a) @ op(b).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
/// Batched matrix product: out[i] = op(a[i]) @ op(b[i]) for a [batch, m, k] and b [batch, k, n]
/// (as transposed), out [batch, m, n]; each entry's bits are matmul's of that entry. An operand
/// of batch 1 serves every entry of the other's batch (numpy's broadcast), read in place.
Tensor batch_matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
enum class FusedActivation { kNone, kRelu };
/// x (N, in) @ kernel (in, out) + bias (out) [, relu]; bias may be undefined. One pass over the output.
Tensor dense(const Tensor& x, const Tensor& kernel, const Tensor& bias,
             FusedActivation activation = FusedActivation::kNone);

// ---- reductions ----
/// Sum over `axis` (all elements when nullopt).
Tensor sum(const Tensor& a, std::optional<int> axis = std::nullopt, bool keepdims = false);
Tensor mean(const Tensor& a, std::optional<int> axis = std::nullopt, bool keepdims = false);
Tensor reduce_max(const Tensor& a, int axis, bool keepdims = false);
/// Index of the largest value along `axis`, as int64 (any dtype; not differentiable).
Tensor argmax(const Tensor& a, int axis = -1);
/// Sums `a` down to `shape` (the reverse of broadcasting `shape` up to a.shape()).
Tensor sum_to_shape(const Tensor& a, const Shape& shape);

// ---- shape ----
/// Recorded reshape (the gradient is reshaped back).
Tensor reshape(const Tensor& a, const Shape& shape);
/// Cuts the gradient: the result is a, but the tape treats it as a constant.
Tensor stop_gradient(const Tensor& a);
Tensor cast(const Tensor& a, DType dtype);  // recorded Tensor::to(dtype): a itself where a has that dtype
/// float32(a) * s for an integer tensor (uint8 pixels), in one pass where the backend has the
/// fused kernel (else a cast, then a scale): cast(a, kF32) then scale(.., s), bit for bit. Not
/// recorded (an integer input has no gradient).
Tensor cast_and_scale(const Tensor& a, float s);
/// Concatenation along `axis` (negative: from the last; same dtype and rank, the same dims but
/// along `axis`). Not recorded.
Tensor concat(const std::vector<Tensor>& tensors, int axis = 0);
/// Stacks same-shaped tensors along a new axis 0. Not recorded.
Tensor stack(const std::vector<Tensor>& tensors);
/// Rows src[indices[r]] (indices: integer, 1-D, each in [0, src.dim(0))). Recorded: src's
/// gradient is the output's scatter-added into zeros (an embedding table's).
Tensor gather_rows(const Tensor& src, const Tensor& indices);
/// Concatenation along `axis` (every other dimension and the dtype equal), recorded.
Tensor concatenate(const std::vector<Tensor>& tensors, int axis = -1);
/// The axes of x permuted: out.dim(i) = x.dim(perm[i]) (numpy.transpose), recorded.
Tensor transpose(const Tensor& x, const std::vector<int>& perm);
/// The same rows written into dst (dst: (indices.numel(), row...), src's dtype and device), e.g.
/// a slice of a batch being gathered in parts.
void gather_rows_into(Tensor& dst, const Tensor& src, const Tensor& indices);
/// cast_and_scale of those rows, bit for bit, in one pass where the backend has the fused kernel:
/// integer rows (uint8 pixels) read as stored and written into dst as float32 (dst: float32,
/// (indices.numel(), row...)).
void gather_rows_scaled_into(Tensor& dst, const Tensor& src, const Tensor& indices, float s);
/// dst[indices[r]] += src[r], in place (dst: the rows; src: (indices.numel(), row...)).
void scatter_add_rows(Tensor& dst, const Tensor& indices, const Tensor& src);
/// (N,) integer labels -> (N, classes) float32 one-hot; a label outside [0, classes) is a
/// ValueError naming it and its index.
Tensor one_hot(const Tensor& labels, std::int64_t classes);
/// Elementwise reduction across same-shaped, same-dtype tensors over elements [begin, end)
/// of their flattened view: combined in the order given (inputs[0] op inputs[1] op ...; kMean
/// divides by the count), the result written into every tensor of `outputs` (which may be
/// the inputs themselves). What the collectives compute with; a fixed order makes results
/// bit-identical run to run.
void reduce_across(ReduceOp op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                   std::int64_t begin, std::int64_t end);

// ---- neural-network ops ----
/// Per-example cross-entropy between integer labels (N,) [any int or u8 dtype] and logits (N, C).
Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits);
/// Per-example cross-entropy between probability targets (N, C) and logits (N, C).
Tensor softmax_cross_entropy_with_logits(const Tensor& targets, const Tensor& logits);

/// Keys of the counter-based dropout RNG: the mask of unit u of example e depends only on
/// (seed, stream, step, first_example + row, u), never on how a batch is split or threaded.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;  // distinguishes dropout layers
  std::uint64_t step = 0;
  std::int64_t first_example = 0;  // global index of row 0 of this (per-replica) batch
  /// A step block (step_block() below) on the input's device: its count is the step, read by
  /// the kernel on the device (a captured step replays with each step's count); undefined:
  /// `step`, a host value.
  Tensor step_block;
};
/// Inverted dropout: zeroes each unit with probability rate and scales the rest by 1/(1-rate).
Tensor dropout(const Tensor& x, float rate, const DropoutKey& key);

/// BatchNormalization's fused passes over x (rows, channels), float32 (kernels of no other dtype);
/// every per-channel tensor is (channels,), of x's dtype. Per-channel sums are exact to float32's rounding of a double sum, the same
/// bits whatever the threads. They are not differentiable themselves (an error while a tape
/// records their inputs): the layer records their gradient as one op (record_custom).
/// sum over rows of (x - mean)^2.
Tensor batch_norm_squared_deviations(const Tensor& x, const Tensor& mean);
/// (x - mean) * scale + offset; offset may be undefined.
Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& scale, const Tensor& offset);
/// {sum over rows of dy, sum over rows of dy * (x - mean) * inv_std}: beta's and gamma's gradients.
std::array<Tensor, 2> batch_norm_grad_sums(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                           const Tensor& inv_std);
/// The input's gradient through the batch's statistics, for y = (x - mean) * scale + offset with
/// scale = gamma * inv_std: scale * (dy - mean_dy - (x - mean) * inv_std * mean_dy_xhat), where
/// mean_dy and mean_dy_xhat are batch_norm_grad_sums divided by the (global) number of rows.
Tensor batch_norm_input_grad(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& inv_std,
                             const Tensor& scale, const Tensor& mean_dy, const Tensor& mean_dy_xhat);

/// LayerNormalization's fused passes over x (rows, features), float32, like batch_norm_*: not
/// differentiable themselves (the layer records their gradient as one op). layer_norm gives
/// {(x - mean) * inv_std * gamma + beta, mean, inv_std} with each row's mean and
/// inv_std = 1 / sqrt(variance + epsilon) ((rows,)); gamma and beta ((features,)) may be undefined.
std::array<Tensor, 3> layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon);
/// The input's gradient through each row's statistics: inv_std * (h - mean_row(h) - xhat *
/// mean_row(h * xhat)), h = dy * gamma (dy when gamma is undefined), xhat = (x - mean) * inv_std.
Tensor layer_norm_input_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                             const Tensor& inv_std);

// ---- convolution and pooling: NHWC activations, float32 ----
/// Zero padding of a 2-D window op, in elements on each side.
struct Padding2d {
  std::int64_t top = 0, bottom = 0, left = 0, right = 0;
};
/// Keras' padding="same" along one spatial dimension (TensorFlow's rule): the output has
/// ceil(in / stride) elements and the odd padding element goes after. {before, after}.
std::array<std::int64_t, 2> same_padding(std::int64_t in, std::int64_t window, std::int64_t stride,
                                         std::int64_t dilation = 1);
/// Output length of a window op along one dimension: floor((in + pad - dilated window) / stride) + 1.
std::int64_t window_output_size(std::int64_t in, std::int64_t window, std::int64_t stride, std::int64_t dilation,
                                std::int64_t pad_before, std::int64_t pad_after);
struct Conv2dOptions {
  std::array<std::int64_t, 2> strides{1, 1};
  std::array<std::int64_t, 2> dilation{1, 1};
  Padding2d padding;
  /// Channel groups: the kernel is (kh, kw, C / groups, OC); groups == C with OC = C * m is a
  /// depthwise convolution with Keras' DepthwiseConv2D kernel (kh, kw, C, m).
  std::int64_t groups = 1;
  /// kRelu: y = max(conv + bias, 0) in the kernel itself (one pass over y fewer than conv then
  /// relu); its gradient is taken from y.
  FusedActivation activation = FusedActivation::kNone;
  /// The forward may run a Winograd kernel where the backend has a faster one for the shape
  /// (CPU: 3x3, stride 1, many channels), with a few times the direct kernel's float32 rounding
  /// error. Layers set it for training passes only, so that inference (predict, evaluate) gives
  /// the direct kernel's numbers, as other frameworks' do. The kernel gradient may use Winograd
  /// whatever this says (it is only ever part of training).
  bool winograd = false;
};
/// x (N, H, W, C) * kernel (KH, KW, C / groups, OC) [+ bias (OC); may be undefined] -> (N, OH, OW, OC).
Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2dOptions& options = {});
/// The transposed convolution (Keras' Conv2DTranspose, tf.nn.conv2d_transpose): the input
/// gradient of the convolution `options` describes, from an (N, output_size, F) image to x's
/// (N, H, W, C) shape, with x in the place of that convolution's output gradient. kernel: (KH, KW,
/// F, C), Keras' Conv2DTranspose layout, which is that convolution's own. -> (N, OH, OW, F), where
/// output_size = (OH, OW) must be an image the convolution maps to (H, W) (several may: strides
/// drop rows), else a ValueError naming both; groups 1 and no fused activation. Recorded: x's
/// gradient is conv2d of the output gradient, the kernel's conv2d's kernel gradient with the
/// output gradient as its input and x as its output gradient.
Tensor conv2d_transpose(const Tensor& x, const Tensor& kernel, const std::array<std::int64_t, 2>& output_size,
                        const Conv2dOptions& options = {});
struct Pool2dOptions {
  std::array<std::int64_t, 2> pool_size{2, 2};
  std::array<std::int64_t, 2> strides{2, 2};
  Padding2d padding;
};
/// Max pooling of x (N, H, W, C); padded positions never win.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options = {});
/// Average pooling of x (N, H, W, C): each window's mean over its elements inside x (padding
/// excluded, as TensorFlow's "same").
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options = {});

/// max_pool2d(conv2d(x, kernel, bias, conv), pool) in one pass, never storing the convolution's
/// output; the gradient goes straight to each window's first maximum. For what a backend's fused
/// kernel takes (the CPU built for AVX-512, float32: a stride-1 convolution whose window holds at
/// most 32 inputs, such as a first layer's 3x3 over 1 or 3 channels, pooled by windows that tile
/// its output); anything else is a ValueError, so callers ask conv2d_max_pool2d_supported first.
Tensor conv2d_max_pool2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2dOptions& conv,
                         const Pool2dOptions& pool);
/// Whether conv2d_max_pool2d takes these arguments on x's device (false also for arguments
/// conv2d or max_pool2d would reject). Layers fuse a Conv2D with the MaxPooling2D that alone
/// reads it when this says so.
bool conv2d_max_pool2d_supported(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2dOptions& conv,
                                 const Pool2dOptions& pool);

/// x (N, H, W, C) surrounded by zeros: (N, H + top + bottom, W + left + right, C).
Tensor zero_pad2d(const Tensor& x, const Padding2d& padding);

/// Per example, 1 where the argmax of predictions equals the integer label, else 0 (float32).
Tensor sparse_categorical_matches(const Tensor& labels, const Tensor& predictions);
/// An accuracy metric's batch state [matches, rows] (float32) in one kernel: the rows of
/// predictions (rows, classes) whose argmax (the first largest; NaN wins) matches their label.
/// labels: one per row, integers compared as themselves (sparse categorical accuracy); with
/// `labels_as_float` (Keras' Accuracy) any dtype cast to float32 and compared with the argmax as
/// a float32, or one-hot rows (rows * classes values, classes > 1) whose argmax is compared.
Tensor accuracy_state(const Tensor& labels, const Tensor& predictions, bool labels_as_float = false);

// ---- gradients: what the autograd layer computes backward passes with ----
/// dx of a unary op (kNeg ... kClip, the OpTypes of the unary functions above) given its input
/// x, its output y and the output's gradient dy; p0 and p1 are the op's scalars.
Tensor unary_grad(OpType op, const Tensor& x, const Tensor& y, const Tensor& dy, float p0 = 0, float p1 = 0);
/// dx of softmax (log_softmax when `log`) over the last axis, given its output y.
Tensor softmax_grad(const Tensor& y, const Tensor& dy, bool log);
/// dx of reduce_max over `axis` of an input of `input_shape`: g at each slice's arg-max, 0 elsewhere.
Tensor reduce_max_grad(const Tensor& argmax, const Tensor& g, const Shape& input_shape, int axis);
/// dlogits of sparse_softmax_cross_entropy_with_logits: (probs - onehot(labels)) * g per row.
Tensor sparse_softmax_cross_entropy_grad(const Tensor& probs, const Tensor& labels, const Tensor& g);

/// dx of conv2d, for an input of `input_shape`.
Tensor conv2d_input_grad(const Tensor& kernel, const Tensor& dy, const Shape& input_shape,
                         const Conv2dOptions& options);
/// {dkernel, dbias} of conv2d for a kernel of `kernel_shape`; dbias is undefined unless with_bias.
std::array<Tensor, 2> conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Shape& kernel_shape,
                                         bool with_bias, const Conv2dOptions& options);
/// dx of max_pool2d (max) or avg_pool2d, given its input x, output y and dy. Max pooling sends
/// each gradient to the first element (row-major in the window) equal to the window's maximum
/// (of a window whose maximum is NaN, to its first NaN, as the fused conv2d_max_pool2d).
/// relu_input (max pooling only): x is the output of a ReLU whose backward masks the result
/// anyway; windows whose maximum is not positive then hand out nothing (see GradientTape).
Tensor pool2d_grad(bool max, const Tensor& x, const Tensor& y, const Tensor& dy, const Pool2dOptions& options,
                   bool relu_input = false);

/// {dx, dkernel, dbias} of the fused conv2d_max_pool2d from its output y and the byte `arg` it
/// recorded (each window's first maximum); each is undefined unless `needs` asks for it (dbias
/// also unless with_bias).
std::array<Tensor, 3> conv2d_max_pool2d_grad(const Tensor& x, const Tensor& kernel, bool with_bias, const Tensor& y,
                                            const Tensor& arg, const Tensor& dy, const Conv2dOptions& conv,
                                            const std::array<std::int64_t, 2>& pool_size,
                                            const std::array<bool, 3>& needs);

// ---- optimizer updates, fused and in place (a Tensor handle aliases the variable's memory) ----
/// sum of squares of every element, accumulated in double.
double sum_squares(const Tensor& a);
/// clamp(a * scale, -clip, clip) elementwise.
Tensor scale_and_clip(const Tensor& a, float scale, float clip);
/// Keras' SGD on float32 w with gradient g; `momentum` (same shape as w) is undefined when mu == 0.
void sgd_update_(Tensor& w, Tensor& momentum, const Tensor& g, float lr, float mu, bool nesterov);
/// One Adam/AdamW step on float32 w with moments m, v; constants already rounded to float32.
struct AdamConstants {
  float alpha = 0;  // lr * sqrt(1 - b2^t) / (1 - b1^t)
  float one_minus_beta_1 = 0, one_minus_beta_2 = 0, epsilon = 0;
  float decay = 0;  // lr * weight_decay (AdamW); 0 for Adam
};
void adam_update_(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, const AdamConstants& c);
/// The sharded update of replicas that share memory (GradientShard::parts): the updates above
/// with the gradient given as `grads` summed in their order, ((grads[0] + grads[1]) + ...), the
/// bits of reduce_across's kSum, and the new weights also written into `copies` (each w's element
/// count, not overlapping it). One pass over the memory: no summed gradient is written.
void sgd_update_(Tensor& w, Tensor& momentum, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                 float lr, float mu, bool nesterov);
void adam_update_(Tensor& w, Tensor& m, Tensor& v, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                  const AdamConstants& c);

// ---- the step's numbers in the device's memory (lockstep/core/step_state.hpp) ----
// A step block is a float32 tensor of step_state::kStepBlockFloats elements holding a StepBlock,
// on the device whose updates read it. The updates below read the step's learning rate and bias
// corrections from it, so that their launches are the same every step (a captured step replays).
/// A new block on this thread's device (zeros: count 0, the step applies).
Tensor step_block();
/// The start of a step (a kernel): the step begun before it counted unless it was skipped (a
/// step's end is no launch of its own), then the block's scalars derived from the count and the
/// block's rule.
void step_begin_(Tensor& block);
/// Writes the optimizer's rule (its schedule or constant rate, its kind and constants) into the
/// block: a kernel taking it as a host value, so before a step, never inside one that is to be
/// captured (a block made, a learning rate set); every later step_begin_ derives by it.
void set_step_rule_(Tensor& block, const step_state::StepRule& rule);
/// Sets the count (the next step applies): a kernel taking it as a host value, so never inside a
/// step that is to be captured (a block made, a checkpoint restored).
void set_step_count_(Tensor& block, std::int64_t iterations);
/// The count once the block's last step has ended (count_after_step): a read from the device
/// (when asked, never per step).
std::int64_t step_count(const Tensor& block);
/// Whether the block's step is marked skipped: a read from the device.
bool step_skipped(const Tensor& block);
/// Adam/AdamW's constants of every step (the step's alpha and decay are the block's).
struct AdamBetas {
  float one_minus_beta_1 = 0, one_minus_beta_2 = 0, epsilon = 0;
};
/// RMSprop's constants of every step (the step's learning rate is the block's), in float32 as
/// Keras rounds them: rho, 1 - rho (computed in double), epsilon, momentum.
struct RmspropConstants {
  float rho = 0, one_minus_rho = 0, epsilon = 0, momentum = 0;
};
/// Keras' RMSprop on float32 w: `velocity` always; `momentum` defined where c.momentum > 0 (else
/// undefined); `average_gradient` defined where centered (else undefined). The learning rate is
/// read from `step`.
void rmsprop_update_(Tensor& w, Tensor& velocity, Tensor& momentum, Tensor& average_gradient, const Tensor& g,
                     const Tensor& step, const RmspropConstants& c);
/// The same with the learning rate given as a value.
void rmsprop_update_(Tensor& w, Tensor& velocity, Tensor& momentum, Tensor& average_gradient, const Tensor& g,
                     float lr, const RmspropConstants& c);
/// The updates above with the step's numbers read from `step` (a block on w's device).
void sgd_update_(Tensor& w, Tensor& momentum, const Tensor& g, const Tensor& step, float mu, bool nesterov);
void adam_update_(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, const Tensor& step, const AdamBetas& b);
void sgd_update_(Tensor& w, Tensor& momentum, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                 const Tensor& step, float mu, bool nesterov);
void adam_update_(Tensor& w, Tensor& m, Tensor& v, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                  const Tensor& step, const AdamBetas& b);

}  // namespace lockstep
