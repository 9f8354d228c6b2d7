#pragma once
// Keras-style layers. A layer creates its variables on build(input_shape) (the batch
// dimension is -1 in shapes), then call() maps a batch to a batch. call() never mutates the
// layer object, so replicas may call one layer from several threads at once; a layer's state
// (moving statistics, counters) lives in non-trainable kOnRead variables, which each replica
// updates in its own copy during call() (Variable::assign inside a replica).
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/layers/initializers.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::layers {

/// What a call needs to know besides its input.
struct CallContext {
  bool training = false;
  std::uint64_t seed = 0;          // the model's seed (dropout and other randomness)
  std::uint64_t step = 0;          // the optimizer step (dropout masks change per step)
  std::int64_t first_example = 0;  // global index of row 0 of this batch within the global batch
  /// The replica running this call under a strategy (all-reduce across replicas), else null.
  ReplicaInterface* replica = nullptr;
  /// The step as dropout reads it on the device (DropoutKey::step_block): this replica's step
  /// block in a train step (the optimizer's, holding `step`); undefined (custom loops): `step`.
  Tensor step_block;
  /// A model's forward may leave a softmax output layer's softmax to the loss (Model::Output's
  /// output undefined, its logits set): the train and test steps, whose loss computes it beside.
  bool softmax_to_loss = false;
  /// predict and evaluate: the call writes no variable, whatever mode its layers run in. A
  /// BatchNormalization called with training=True there normalises by the batch's statistics
  /// (the call's mode, as a Dropout called so drops) and leaves its moving statistics alone: as
  /// Keras 3, whose predict and evaluate change no weight (tf.keras 2's moved them).
  bool read_only = false;
};

/// Keras' call keyword arguments that are settings, for the layers whose call takes them
/// (lockstep::CallKwargs, functional.hpp, says which).
struct CallOptions {
  bool return_attention_scores = false;  // MultiHeadAttention's: the call gives (output, scores)
  bool use_causal_mask = false;          // MultiHeadAttention's
};

/// A call's arguments besides its inputs, as a Functional model passes them to
/// Layer::call_outputs: the inputs' masks and Keras' call keyword arguments.
struct CallArguments {
  CallOptions options;
  std::vector<Tensor> masks;          // per input: its mask, or the call's mask= (undefined: none)
  std::vector<Tensor> initial_state;  // a recurrent layer's: one [batch, units] tensor per state
  /// MultiHeadAttention's attention_mask, [batch, query length, value length], nonzero where a
  /// query step may attend (undefined: none).
  Tensor attention_mask;
};

/// A call's arguments as a Functional model records them, by shape (batch dimension -1): what
/// Layer::check_call_arguments judges before the call is recorded. Keras' keyword arguments that
/// only some layers' calls take (training= and mask= are every layer's: CallKwargs, functional.hpp).
struct CallSignature {
  std::vector<Shape> inputs;                        // the tensors called on: one, or a merge layer's list
  CallOptions options;                              // return_attention_scores=, use_causal_mask=
  std::optional<std::vector<Shape>> initial_state;  // initial_state= (nullopt: not given)
  std::optional<Shape> attention_mask;              // attention_mask= (nullopt: not given)
};

class Layer {
 public:
  explicit Layer(std::string name = "");
  virtual ~Layer() = default;

  virtual std::string class_name() const = 0;
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  /// Keras' get_config(): the layer's name and constructor arguments under Keras' names, what its
  /// class's registered from_config (layer_registry.hpp) makes it again from. This base gives the
  /// name only: a layer with arguments adds them.
  virtual nlohmann::json get_config() const;
  /// How a Keras file writes this layer where it differs by class (each layer owns its own):
  /// where the weights file keeps variables()[index] under the layer's group ("vars/<index>");
  /// whether Keras calls it on positional tensors, layer(a, b), rather than on one list,
  /// layer([a, b]) (false); and the build_config of a layer called on a list, given its inputs'
  /// shapes as Keras writes them ({"input_shape": [shapes...]}).
  virtual std::string keras_weight_path(std::size_t index) const;
  virtual bool keras_positional_call() const { return false; }
  /// The module and registered name Keras writes for the class: Keras' own layers are
  /// ("keras.layers", "" for none); a class of another package (keras_hub's) says so.
  virtual std::string keras_module() const { return "keras.layers"; }
  virtual std::string keras_registered_name() const { return ""; }
  virtual nlohmann::json keras_build_config(const nlohmann::json& input_shapes) const;
  /// The training= Keras writes on each call of the class given none: the default of `training`
  /// in its call's signature where that is not None (Keras' Layer._resolve_and_populate_arg):
  /// Dropout's and the recurrent layers' call(..., training=False). nullopt (this base): none.
  /// A file's training= equal to it says nothing about the call, so a loaded call takes none (read
  /// as the call's own, a loaded LSTM's dropout would never act in fit).
  virtual std::optional<bool> keras_training_default() const { return std::nullopt; }
  /// A wrapper's inner layers as a Keras file keeps them (Bidirectional's): the key of the
  /// wrapper's config that holds each one's Keras config, and its group in the weights file
  /// (where Keras writes its own "vars" group beside the wrapper's weights). None (this base).
  struct KerasSublayer {
    std::string config_key;
    std::string weights_group;
    const Layer* layer = nullptr;
  };
  virtual std::vector<KerasSublayer> keras_sublayers() const { return {}; }

  /// Creates variables for input_shape (batch dimension -1); throws ValueError naming the shape
  /// and the layer when it cannot accept it. Idempotent for the same shape.
  void build(const Shape& input_shape, std::uint64_t seed);
  bool built() const { return built_; }
  const Shape& input_shape() const { return input_shape_; }
  /// The input shape given at construction (input_dim / input_shape), if any.
  const std::optional<Shape>& declared_input_shape() const { return declared_input_shape_; }

  virtual Shape compute_output_shape(const Shape& input_shape) const = 0;
  virtual Tensor call(const Tensor& x, const CallContext& ctx) const = 0;
  /// For a layer whose activation is softmax: its output before the softmax (the logits), so
  /// that cross-entropy is computed stably as Keras does. Undefined for other layers.
  virtual bool has_softmax_output() const { return false; }
  virtual Tensor call_logits(const Tensor&, const CallContext&) const { return Tensor(); }
  /// next.call(call(x)) in one fused op where this layer and `next` have one (Conv2D then
  /// MaxPooling2D: conv2d_max_pool2d), else undefined. Models call it where `next` is the only
  /// reader of this layer's output, since that output then exists nowhere.
  virtual Tensor call_then(const Layer& /*next*/, const Tensor& /*x*/, const CallContext& /*ctx*/) const {
    return Tensor();
  }

  /// Keras' calls of several tensors, owned here: how many tensors a call with `options` gives.
  /// One (this base) unless the layer's settings or the call ask for more: a recurrent layer's
  /// return_state (its output, then its states), Bidirectional's merge_mode=None (forward output,
  /// backward output), MultiHeadAttention's return_attention_scores (output, scores). Sequential
  /// and lockstep::call take calls of one; a Functional model's call_outputs gives them all.
  virtual std::size_t output_count(const CallOptions& /*options*/) const { return 1; }
  /// What such a call gives and the setting that asks for it, in Keras' words, for messages:
  /// "its output and its states (return_state=True)". This base: "its output".
  virtual std::string describe_outputs(const CallOptions& options) const;
  /// The shapes of such a call's tensors after the first (output_count - 1 of them), given its
  /// inputs' shapes (batch dimension -1). This base: none.
  virtual std::vector<Shape> more_output_shapes(const std::vector<Shape>& /*inputs*/,
                                                const CallOptions& /*options*/) const {
    return {};
  }
  /// The mask of each of those tensors given the output's (compute_mask's): none (this base;
  /// Keras' RNN.compute_mask gives the states none, attention scores have none).
  virtual Tensor more_outputs_mask(const Tensor& /*output_mask*/) const { return Tensor(); }
  /// A call given `args` (a Functional model's call with keyword arguments, on a list, or of
  /// several tensors): its output_count(args.options) tensors. This base: call_masked or call on
  /// the one input; a merge layer merges; a layer taking keyword arguments reads them.
  virtual std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                           const CallContext& ctx) const;

  /// ValueError naming the layer and the argument unless its call takes `call`'s keyword
  /// arguments, of those shapes: each layer answers for its own call (Keras' call signature).
  /// This base takes none (refuse_other_arguments); a recurrent layer takes initial_state, one
  /// (batch, units) tensor per state; MultiHeadAttention its attention arguments. A layer of one's
  /// own that takes one reads it in call_outputs (CallArguments).
  virtual void check_call_arguments(const CallSignature& call) const { refuse_other_arguments(call, {}); }

  /// Keras' masks: a [batch, steps] tensor, nonzero where a step counts (undefined: none), made by Masking or
  /// Embedding(mask_zero=true) and carried by models from layer to layer. The mask of this layer's output given
  /// x and x's mask (Keras' compute_mask), which a model asks of every call, the output layer's too, x masked or
  /// not (Keras' Layer.__call__, _set_mask_metadata): x's mask where the layer keeps the steps, else none.
  virtual bool supports_masking() const { return false; }
  virtual Tensor compute_mask(const Tensor& /*x*/, const Tensor& mask) const {
    return supports_masking() ? mask : Tensor();
  }
  /// call() given x's mask (defined); a layer that uses it (GlobalAveragePooling1D) overrides.
  virtual Tensor call_masked(const Tensor& x, const Tensor& /*mask*/, const CallContext& ctx) const {
    return call(x, ctx);
  }
  /// The call a model makes, given x's mask (undefined: none) and the mask of the call's output as
  /// the model computed it beforehand (compute_mask(x, mask); undefined: not computed): a layer
  /// whose output is made from that mask reads it rather than compute it again (Masking zeroes the
  /// steps it masks). This base: call_masked where x has a mask, else call.
  virtual Tensor call_with_output_mask(const Tensor& x, const Tensor& mask, const Tensor& /*output_mask*/,
                                       const CallContext& ctx) const {
    return mask.defined() ? call_masked(x, mask, ctx) : call(x, ctx);
  }
  /// Whether call_masked reads the mask: Keras' layers whose call takes a `mask` argument
  /// (Softmax, GlobalAveragePooling1D), which Keras fills with the input's mask unless the caller
  /// gives one, layer(x, mask=m) (CallKwargs::mask). Such a softmax output is not split into
  /// logits when it is called with a mask (the mask acts on the logits).
  virtual bool call_takes_mask() const { return false; }
  /// ValueError naming the layer unless a call on `input` may take a mask of shape `mask` (-1: a
  /// dimension not known yet, not compared). This base: the input's steps, its shape less the
  /// last axis (GlobalAveragePooling1D's [batch, steps]).
  virtual void check_call_mask(const Shape& mask, const Shape& input) const;

  /// The layer's mixed-precision policy: the global policy when the layer was made, unless set.
  const mixed_precision::Policy& dtype_policy() const { return policy_; }
  void set_dtype_policy(const mixed_precision::Policy& policy) { policy_ = policy; }
  DType compute_dtype() const { return policy_.compute_dtype(); }

  const std::vector<Variable>& variables() const { return variables_; }
  /// Keras' trainable_variables / non_trainable_variables: a frozen layer's are all non-trainable.
  std::vector<Variable> trainable_variables() const;
  std::vector<Variable> non_trainable_variables() const;
  /// Keras' layer.trainable (true unless set): set false, the layer is frozen. Its weights made
  /// trainable become non-trainable (Keras 3 sets each variable's flag), so the tape does not
  /// watch them and fit neither reduces nor updates them; BatchNormalization also runs in
  /// inference mode inside fit. Set true, they train again. fit takes the setting at compile
  /// (Keras' rule: compile again after changing it; Model::compile). Weights made after the
  /// call (a layer built later) follow it.
  bool trainable() const { return trainable_; }
  void set_trainable(bool trainable);
  /// How many times set_trainable changed a layer's setting in this process, ever: a model reads
  /// its layers' settings again only where this count moved (Model::refresh_step_variables).
  static std::uint64_t trainable_changes();
  /// How many weights the layers of this process have made (add_weight), ever: a model keeps
  /// its walk of its layers' variables while this count stays (Model::refresh_step_variables),
  /// however and by whom its layers were built.
  static std::uint64_t weights_made();
  std::int64_t count_params() const;

 protected:
  /// The keyword arguments of CallSignature a layer's call takes (check_call_arguments').
  struct AcceptedArguments {
    bool initial_state = false;
    bool attention_mask = false;
    bool use_causal_mask = false;
    bool return_attention_scores = false;
  };
  /// ValueError naming the layer and the first argument of `call` that `accepted` leaves out, and
  /// the Keras layers whose calls take it.
  void refuse_other_arguments(const CallSignature& call, const AcceptedArguments& accepted) const;
  virtual void build_impl(const Shape& input_shape, std::uint64_t seed);
  Variable add_weight(const std::string& name, const Shape& shape, const Initializer& init, std::uint64_t seed,
                      bool trainable = true);
  /// A weight with explicit synchronization and aggregation (Keras' add_weight arguments), e.g.
  /// a moving mean: {.trainable = false, .synchronization = kOnRead, .aggregation = kMean}.
  /// options.name is the weight's name within the layer.
  Variable add_weight(const Shape& shape, const Initializer& init, std::uint64_t seed, VariableOptions options);
  /// Holds a built inner layer's weights as this layer's own too, after those it has: a wrapper
  /// whose inner layers compute with them (Bidirectional). One copy of each weight, which this
  /// layer's freezing, saving and mirroring reach.
  void adopt_weights(const Layer& inner);
  std::optional<Shape> declared_input_shape_;
  /// A floating tensor in the compute dtype (a recorded cast when it is not): what call() does
  /// to its inputs and to the values of its variables (Keras' autocast).
  Tensor autocast(const Tensor& x) const;

 private:
  mixed_precision::Policy policy_ = mixed_precision::global_policy();
  std::string name_;
  bool built_ = false;
  Shape input_shape_;
  std::vector<Variable> variables_;
  std::vector<bool> made_trainable_;  // per variables_: trainable as add_weight was asked (what unfreezing restores)
  bool trainable_ = true;
};

using LayerPtr = std::shared_ptr<Layer>;

/// (d0, d1, ...) -> (None, d0, d1, ...): a per-example shape with an unknown batch dimension.
Shape with_batch_dim(const Shape& per_example);

/// Keras 3's activation names (keras/src/activations/activations.py): "linear" (or ""), "relu",
/// "sigmoid", "tanh", "softmax", "gelu" (the exact form, Keras' default), "log_softmax", "silu" (or
/// its alias "swish"), "elu", "selu", "leaky_relu" (the function's negative_slope 0.2), "relu6",
/// "softplus", "softsign", "hard_sigmoid" (relu6(x + 3) / 6), "hard_silu" (or its alias
/// "hard_swish"), "exponential", "mish", "celu", "hard_tanh", "log_sigmoid", "hard_shrink",
/// "soft_shrink", "tanh_shrink", "squareplus", "sparse_plus", "sparse_sigmoid" (each with its
/// function's defaults); Keras' glu, sparsemax and threshold are refused by name, saying why;
/// anything else throws ValueError listing the names.
enum class ActivationKind {
  kLinear, kRelu, kSigmoid, kTanh, kSoftmax, kGelu, kLogSoftmax, kSilu,
  kElu, kSelu, kLeakyRelu, kRelu6, kSoftplus, kSoftsign, kHardSigmoid, kHardSilu, kExponential, kMish,
  kCelu, kHardTanh, kLogSigmoid, kHardShrink, kSoftShrink, kTanhShrink, kSquareplus, kSparsePlus, kSparseSigmoid
};
ActivationKind parse_activation(const std::string& name);
std::string activation_name(ActivationKind kind);
Tensor apply_activation(ActivationKind kind, const Tensor& x);

}  // namespace lockstep::layers
