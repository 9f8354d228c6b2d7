#pragma once
// Keras 3's recurrent layers on sequences [batch, steps, features]: SimpleRNN, LSTM and GRU, with
// Keras' names, defaults, gate orders and weights (kernel (features, gates * units),
// recurrent_kernel (units, gates * units), bias), which a .keras file keeps under the layer's cell
// ("layers/lstm/cell/vars/0"), as Keras 3 does.
//
// The time loop and the mask rule have one owner, RecurrentLayer::run (Keras' backend rnn()):
// the input projection x·kernel for every step in one matmul, then per step one matmul with the
// recurrent kernel and elementwise ops, all recorded, so autograd gives the backward. A step the
// mask drops (Embedding(mask_zero=True) padding) carries the states over unchanged and outputs
// the previous step's output (zeros before the first kept step), or zeros with
// zero_output_for_mask; the output's mask is the input's with return_sequences, none otherwise.
// go_backwards runs the steps last to first and returns the outputs in that order (Keras' rule).
//
// dropout and recurrent_dropout (training only) are Keras' masks fixed over the steps: one mask
// [batch, features] on the inputs and one [batch, units] on the previous state; with
// recurrent_dropout, one of each per gate (Keras' implementation 1). They come from lockstep's
// dropout op keyed by the model's seed (or the layer's own seed, Keras' seed argument), the step
// and the example (Keras' random draws differ).
//
// return_state (Keras'): a call in a Functional model gives [output, h] (SimpleRNN, GRU) or
// [output, h, c] (LSTM) (lockstep::call_outputs, functional.hpp), the states without a mask (Keras'
// RNN.compute_mask); a Sequential refuses such a layer, as Keras does. Keras' initial_state is a
// call's argument (CallKwargs::initial_state; in C++ also run()'s).
//
// Not supported, refused by name where a config (a .keras file, Python) asks for them (the
// registry's keras_fixed): stateful=True and unroll=True; activations lockstep lacks are a
// ValueError listing those it has.
#include <vector>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// The arguments of the three layers, under Keras' names and with Keras' defaults. Each layer
/// reads the ones its Keras class has: recurrent_activation (LSTM, GRU), unit_forget_bias (LSTM),
/// reset_after (GRU).
struct RecurrentOptions {
  std::int64_t units = 0;
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string recurrent_initializer = "orthogonal";
  std::string bias_initializer = "zeros";
  /// LSTM: the forget gate's bias starts at 1 (Keras' unit_forget_bias, Jozefowicz et al.).
  bool unit_forget_bias = true;
  /// GRU: the reset gate applies after the recurrent matmul (Keras 3's default, cuDNN's form),
  /// with separate input and recurrent biases, bias (2, 3 * units); false: before it, bias (3 * units).
  bool reset_after = true;
  /// The output at every step [batch, steps, units], else the last step's [batch, units].
  bool return_sequences = false;
  /// A Functional model's call also gives the final states (Keras' return_state), after the output.
  bool return_state = false;
  bool go_backwards = false;
  /// A step the mask drops outputs zeros instead of the previous output (states carry over either way).
  bool zero_output_for_mask = false;
  /// Keras' dropout of the inputs and recurrent_dropout of the previous state, in [0, 1).
  float dropout = 0.0f;
  float recurrent_dropout = 0.0f;
  /// Keras' seed for the dropout masks: the layer's own stream of draws (else the model's
  /// per-layer seed's); kept in the config, null when not given.
  std::optional<std::int64_t> seed;
  std::string name;
};

/// What RecurrentLayer::run gives: the layer's output (as call()) and the final states (Keras'
/// return_state): [h] for SimpleRNN and GRU, [h, c] for LSTM, each [batch, units].
struct RecurrentResult {
  Tensor output;
  std::vector<Tensor> states;
};

/// The shared part of SimpleRNN, LSTM and GRU: options, weights, the time loop and the mask rule.
/// A layer adds its cell: its gate count, its bias, and one step.
class RecurrentLayer : public Layer {
 public:
  const RecurrentOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& recurrent_kernel() const { return recurrent_kernel_; }
  const Variable& bias() const { return bias_; }  // undefined without use_bias
  /// The states the layer carries: 1 (SimpleRNN, GRU: h) or 2 (LSTM: h, c), each [batch, units].
  int state_count() const { return states_; }

  /// Runs the layer over x [batch, steps, features] given its mask [batch, steps] (undefined:
  /// every step counts; nonzero: the step counts) and initial states (empty: zeros; else one
  /// [batch, units] tensor per state, Keras' initial_state). ValueError naming the layer for a
  /// shape it was not built for or states of another count or shape.
  RecurrentResult run(const Tensor& x, const Tensor& mask, const std::vector<Tensor>& initial_states,
                      const CallContext& ctx) const;

  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool supports_masking() const override { return true; }
  /// Keras' RNN.compute_mask: the input's mask with return_sequences, else none.
  Tensor compute_mask(const Tensor& x, const Tensor& mask) const override;
  Tensor call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const override;
  bool call_takes_mask() const override { return true; }
  /// With return_state: 1 + state_count() tensors, the output then the states [batch, units].
  std::size_t output_count(const CallOptions& options) const override;
  std::string describe_outputs(const CallOptions& options) const override;
  std::vector<Shape> more_output_shapes(const std::vector<Shape>& inputs, const CallOptions& options) const override;
  /// Keras' RNN.call(sequences, initial_state=...): one (batch, units) tensor per state.
  void check_call_arguments(const CallSignature& call) const override;
  /// run() from the call's initial_state: its output, then (return_state) its states.
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                   const CallContext& ctx) const override;
  /// Keras' RNN.call(..., training=False).
  std::optional<bool> keras_training_default() const override { return false; }
  /// "cell/vars/<index>": Keras 3 keeps an RNN's weights in its cell.
  std::string keras_weight_path(std::size_t index) const override;
  nlohmann::json get_config() const override;

 protected:
  RecurrentLayer(const RecurrentOptions& options, const char* class_name, int gates, int states);
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;
  /// The layer's options from a config (Keras' keys), refusing what lockstep does not run.
  static RecurrentOptions options_from_config(const nlohmann::json& config, const char* class_name);

  /// What a step reads: this step's x·kernel (+ the input bias), the previous state times the
  /// recurrent kernel (each gate's block through its recurrent dropout mask), and what GRU's
  /// reset_after=False needs besides.
  struct StepInputs {
    Tensor projected;                   // [batch, gates * units]
    Tensor recurrent;                   // [batch, gates * units]
    Tensor recurrent_kernel;            // [units, gates * units]
    Tensor recurrent_bias;              // GRU with reset_after: [gates * units]; else undefined
    std::vector<Tensor> kernel_gates;   // with recurrent dropout: the recurrent kernel's gate blocks [units, units]
    std::vector<Tensor> masked_states;  // with recurrent dropout: states[0] through each gate's mask
  };
  /// One step of the cell: the new states (states[0] is the step's output, h).
  virtual std::vector<Tensor> step(const StepInputs& in, const std::vector<Tensor>& states) const = 0;
  /// The bias' shape and initial value (LSTM's unit_forget_bias, GRU's (2, 3 * units)).
  virtual Shape bias_shape() const;
  virtual Tensor initial_bias(std::uint64_t seed) const;
  /// The input bias added to x·kernel (GRU with reset_after: the bias' first row).
  virtual Tensor input_bias(const Tensor& bias) const { return bias; }
  virtual Tensor recurrent_bias(const Tensor&) const { return Tensor(); }
  /// Rows r * count + at of `rows` for r in [0, n): [n, ...], recorded (the gradient scatters
  /// back): one gate of a [n * gates, units] view (count = gates). (A step's rows are a block of
  /// the time-major projection, read as a view: slice_rows.)
  static Tensor every_nth_row(const Tensor& rows, std::int64_t n, std::int64_t count, std::int64_t at);
  /// Gate g of z [n, gates * units]: [n, units] (recorded).
  Tensor gate(const Tensor& z, int g) const;
  ActivationKind activation() const { return activation_; }
  ActivationKind recurrent_activation() const { return recurrent_activation_; }
  const char* cls() const { return class_name_; }

 private:
  RecurrentOptions options_;
  const char* class_name_;
  int gates_;
  int states_;
  std::uint64_t dropout_stream_ = 0;  // the layer's dropout stream (its build seed)
  ActivationKind activation_;
  ActivationKind recurrent_activation_;
  Variable kernel_, recurrent_kernel_, bias_;
};

/// Keras' SimpleRNN: h = activation(x·kernel + h·recurrent_kernel + bias).
class SimpleRNNLayer final : public RecurrentLayer {
 public:
  explicit SimpleRNNLayer(const RecurrentOptions& options);
  std::string class_name() const override { return "SimpleRNN"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);

 protected:
  std::vector<Tensor> step(const StepInputs& in, const std::vector<Tensor>& states) const override;
};

/// Keras' LSTM, gates in the order i, f, c, o: c = f * c + i * activation(z_c),
/// h = o * activation(c), the gates through recurrent_activation.
class LSTMLayer final : public RecurrentLayer {
 public:
  explicit LSTMLayer(const RecurrentOptions& options);
  std::string class_name() const override { return "LSTM"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);

 protected:
  std::vector<Tensor> step(const StepInputs& in, const std::vector<Tensor>& states) const override;
  Tensor initial_bias(std::uint64_t seed) const override;
};

/// Keras' GRU, gates in the order z, r, h: h = z * h + (1 - z) * activation(x_h + r * (h·R_h + b_h))
/// (reset_after), or activation(x_h + (r * h)·R_h) (reset_after=False).
class GRULayer final : public RecurrentLayer {
 public:
  explicit GRULayer(const RecurrentOptions& options);
  std::string class_name() const override { return "GRU"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);

 protected:
  std::vector<Tensor> step(const StepInputs& in, const std::vector<Tensor>& states) const override;
  Shape bias_shape() const override;
  Tensor input_bias(const Tensor& bias) const override;
  Tensor recurrent_bias(const Tensor& bias) const override;
};

LayerPtr SimpleRNN(std::int64_t units, const std::string& activation = "tanh", bool return_sequences = false);
LayerPtr SimpleRNN(const RecurrentOptions& options);
LayerPtr LSTM(std::int64_t units, bool return_sequences = false);
LayerPtr LSTM(const RecurrentOptions& options);
LayerPtr GRU(std::int64_t units, bool return_sequences = false);
LayerPtr GRU(const RecurrentOptions& options);

}  // namespace lockstep::layers
