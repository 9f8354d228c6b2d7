#pragma once
// Keras' functional API: a model as a graph of layer calls.
//
//   auto inputs = lockstep::Input({32, 32, 3});
//   auto x = lockstep::call(layers::Conv2D(16, {3, 3}, "relu", "same"), inputs);
//   auto y = lockstep::call(layers::Conv2D(16, {3, 3}, "linear", "same"), x);
//   x = lockstep::call(layers::Add(), {x, y});                 // a merge layer takes a list
//   auto outputs = lockstep::call(layers::Dense(10, "softmax"), lockstep::call(layers::Flatten(), x));
//   lockstep::Functional model(inputs, outputs);               // Keras' keras.Model(inputs, outputs)
//
// A call on symbolic tensors only computes the output shape (an error naming the layer and the
// shapes when the layer cannot take them); the model builds its layers, in Keras' layer order, with
// seeds from the model's seed, so a Functional and the equivalent Sequential start from the same
// weights. Layers made without a name are named by the model as Sequential names them ("conv2d",
// "conv2d_1", ... in layer order). A layer may be called more than once (shared weights), on
// inputs of the shape it was first called on.
//
// Several inputs and outputs, as lists or dicts (Keras' keras.Model(inputs=[a, b], outputs={"cls":
// c, "reg": d})): lockstep::Functional model({image, tab}, {{"cls", c}, {"reg", d}}). Their order
// and names are the model's Structure (structure.hpp).
//
// A call that gives several tensors (Keras' layer call returning a list or tuple): a recurrent
// layer made with return_state (Keras' [output, h, c] for LSTM, [output, h] for GRU and
// SimpleRNN), a MultiHeadAttention call with return_attention_scores ((output, scores)) and a
// Bidirectional with merge_mode=None ([forward output, backward output], both with its mask).
// lockstep::call_outputs gives them all, in Keras' order; lockstep::call refuses such a call by
// name. A symbolic tensor is one output of one call, Keras' keras_history [layer, node index,
// tensor index] (KerasTensor::index()):
//   auto enc = lockstep::call_outputs(layers::LSTM({.units = 64, .return_state = true}), encoder_inputs);
//   std::vector<lockstep::KerasTensor> states{enc[1], enc[2]};            // [h, c]
//   auto y = lockstep::call(decoder_lstm, decoder_inputs, {.initial_state = &states});
//   auto att = lockstep::call_outputs(mha, {query, value}, {.return_attention_scores = true});  // {output, scores}
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lockstep/training/model.hpp"
#include "lockstep/training/structure.hpp"

namespace lockstep {

namespace detail {
struct KerasNode;
}

class KerasTensor;
/// Keras' keras.Input: a symbolic input of `shape` per example (no batch dimension).
KerasTensor Input(Shape shape, std::string name = "");
/// Calls `layer` on a symbolic tensor (Keras' layer(x)). ValueError naming the layer and the
/// shapes when it cannot take x, or when the layer was called (or built) before on another shape.
KerasTensor call(const layers::LayerPtr& layer, const KerasTensor& x);
/// Calls a merge layer (Add) on a list of symbolic tensors: lockstep::call(layers::Add(), {a, b}).
KerasTensor call(const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs);
/// Keras' keyword arguments of a call.
///   training: Keras' layer(x, training=False): this call always runs in inference mode (Dropout
///     off, BatchNormalization on its moving statistics, which it leaves alone), in fit too; true:
///     always in training mode (Dropout in predict too); unset: the mode of fit / evaluate /
///     predict or of the model's call. Any layer, and a model (call(model, xs, kwargs)).
///   use_causal_mask, attention_mask: a MultiHeadAttention's (mha(query, value,
///     attention_mask=mask, use_causal_mask=True)); the mask is a tensor of the graph, [batch,
///     query length, value length], nonzero where a query may attend.
///   mask: Keras' layer(x, mask=m), for a layer whose call takes a mask (Layer::call_takes_mask:
///     Softmax, GlobalAveragePooling1D): the call's mask instead of its input's, and its output's
///     mask (Keras' previous_mask). A tensor of the graph of a shape the layer takes
///     (Layer::check_call_mask).
///   return_attention_scores: a MultiHeadAttention's; the call gives (output, scores), the scores
///     [batch, heads, query length, value length] (the attention probabilities, before dropout),
///     computed apart from the fused kernel only for such a call (call_outputs).
///   initial_state: a recurrent layer's (Keras' rnn(x, initial_state=[h, c])): one tensor of the
///     graph per state ([h] for SimpleRNN and GRU, [h, c] for LSTM), each [batch, units]; the
///     gradient flows into them (an encoder's states trained through its decoder).
struct CallKwargs {
  std::optional<bool> training;
  bool use_causal_mask = false;
  const KerasTensor* attention_mask = nullptr;
  const KerasTensor* mask = nullptr;
  bool return_attention_scores = false;
  const std::vector<KerasTensor>* initial_state = nullptr;
};
/// call(mha, {query, value}, {.use_causal_mask = true}), call(bn, {x}, {.training = false}).
/// ValueError for an attention mask on a layer other than MultiHeadAttention, or one of another
/// shape than [batch, query length, value length]; for a mask on a layer whose call takes none, or
/// one it cannot take.
KerasTensor call(const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs, const CallKwargs& kwargs);
/// call(dropout, x, {.training = true}).
KerasTensor call(const layers::LayerPtr& layer, const KerasTensor& x, const CallKwargs& kwargs);
/// Every tensor a call gives, in Keras' order (one for most calls; see the header comment). The
/// same checks as call(); call() is call_outputs() of a call that gives one tensor, and a
/// ValueError naming the layer and call_outputs for one that gives several.
std::vector<KerasTensor> call_outputs(const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs,
                                      const CallKwargs& kwargs = {});
std::vector<KerasTensor> call_outputs(const layers::LayerPtr& layer, const KerasTensor& x, const CallKwargs& kwargs = {});

class Model;
/// Keras' model(x) on symbolic tensors, one per input in the model's input structure's order: the
/// model's layers called again on them, the same layer objects (so their weights are shared, as
/// Keras shares a nested model's), giving one symbolic tensor per output in its output
/// structure's order. A Sequential's layers are chained, a Functional's calls replayed in order;
/// the outer model then holds those layers (not the inner model). ValueError naming the model for
/// another count of inputs or an input of another shape than the model takes.
std::vector<KerasTensor> call(const Model& model, const std::vector<KerasTensor>& xs);
/// Keras' base_model(x, training=False) (the transfer-learning guide's): every layer call of the
/// model runs in that mode, except a call given a mode of its own inside the model (the innermost
/// call's training= decides, as a layer's own argument does). Only kwargs.training: ValueError
/// for a MultiHeadAttention's kwargs.
std::vector<KerasTensor> call(const Model& model, const std::vector<KerasTensor>& xs, const CallKwargs& kwargs);

/// A symbolic tensor: the output of lockstep::Input or of a layer called on symbolic tensors.
/// Holds its producing layer and inputs (shared, cheap to copy).
class KerasTensor {
 public:
  KerasTensor() = default;
  bool defined() const { return node_ != nullptr; }
  /// Which of its call's outputs this is (Keras' tensor_index): 0 but for call_outputs' later ones.
  int index() const { return index_; }
  /// Batch dimension -1, e.g. (None, 8, 8, 16).
  const Shape& shape() const;
  /// The layer whose output this is (an InputLayer for lockstep::Input).
  const layers::LayerPtr& layer() const;
  /// The tensors the layer was called on (none for an input), then its initial states, then its
  /// attention mask or its mask (CallKwargs).
  const std::vector<KerasTensor>& inputs() const;
  /// Whether the layer was called on a list (a merge layer).
  bool list_call() const;
  const detail::KerasNode* node() const { return node_.get(); }

 private:
  explicit KerasTensor(std::shared_ptr<const detail::KerasNode> node, int index = 0)
      : node_(std::move(node)), index_(index) {}
  friend KerasTensor Input(Shape, std::string);
  friend std::vector<KerasTensor> call_outputs(const layers::LayerPtr&, const std::vector<KerasTensor>&,
                                               const CallKwargs&);
  friend struct detail::KerasNode;  // its destructor lets go of a long chain without recursing
  std::shared_ptr<const detail::KerasNode> node_;
  int index_ = 0;
};

/// A model's inputs or outputs as symbolic tensors: one, a list, or a dict (flat in its keys'
/// sorted order, as Keras flattens a dict).
struct KerasTensors {
  KerasTensors(const KerasTensor& one);  // NOLINT(google-explicit-constructor): keras.Model(x, y)
  KerasTensors(std::initializer_list<KerasTensor> list) : KerasTensors(std::vector<KerasTensor>(list)) {}
  KerasTensors(std::vector<KerasTensor> list);  // NOLINT(google-explicit-constructor)
  KerasTensors(const std::map<std::string, KerasTensor>& dict);  // NOLINT(google-explicit-constructor)
  /// {{"image", a}, {"tab", b}}: a dict.
  KerasTensors(std::initializer_list<std::pair<const std::string, KerasTensor>> dict)
      : KerasTensors(std::map<std::string, KerasTensor>(dict)) {}
  Structure::Form form = Structure::Form::kOne;
  std::vector<KerasTensor> flat;
  std::vector<std::string> keys;  // a dict's, in flat order
};

/// Keras' Functional model (keras.Model(inputs, outputs)). forward() runs the layers' calls in
/// topological order and ends each output as Sequential ends (a final softmax and the loss in
/// float32). ValueError at construction when an output is not computed from `inputs` alone
/// (naming the tensor it depends on instead), an input is not used, or a layer cannot take its inputs.
class Functional final : public Model {
 public:
  /// `seed`: the model's seed (weights and dropout), by default the global one as for every model.
  Functional(const KerasTensors& inputs, const KerasTensors& outputs, std::string name = "functional",
             std::optional<std::uint64_t> seed = std::nullopt);

  /// The most layer calls (nodes, the input's included) a model may have: far above any real
  /// model (ResNet-152 has about 500), low enough that a hostile config file is refused by name
  /// before it costs much time or memory.
  static constexpr std::size_t kMaxNodes = 100000;

  /// One layer call of the graph, in execution (topological) order.
  struct Node {
    std::size_t layer;                // index into layers()
    // indices of earlier nodes: the call's arguments, then its initial states, then its attention mask or mask
    std::vector<std::size_t> inputs;
    std::vector<int> input_index;     // per input, which output of that node it reads (Keras' tensor_index)
    bool list_call = false;           // called on a list (merge layers)
    bool use_causal_mask = false;     // CallKwargs
    bool attention_mask = false;      // inputs.back() is the call's attention_mask
    bool call_mask = false;           // inputs.back() is the call's mask (CallKwargs::mask)
    bool return_attention_scores = false;  // CallKwargs
    std::size_t initial_states = 0;   // CallKwargs::initial_state: how many inputs after the arguments
    std::optional<bool> training;     // CallKwargs: the call's own mode, over the model's
    std::size_t arguments() const {
      return inputs.size() - initial_states - (attention_mask || call_mask ? 1 : 0);
    }
    Shape output_shape;               // tensor 0's
    std::vector<Shape> more_outputs;  // a call that gives several tensors: those after the first
    std::size_t outputs() const { return 1 + more_outputs.size(); }
    const Shape& output(std::size_t index) const { return index == 0 ? output_shape : more_outputs.at(index - 1); }
    int index_in_layer = 0;           // Keras' node_index: this call's number among the layer's calls
  };

  // layers() (Model's), Keras' model.layers: the InputLayer first, then by depth from the inputs
  // (ties in the order Keras' graph walk from the output meets them), each layer once however
  // often it is called. Variables follow this order.
  const std::vector<Node>& nodes() const { return nodes_; }
  /// The nodes that call layers()[layer], in execution order: one lookup, so that walks over
  /// every layer's calls (summary, saving) stay linear in the size of the graph.
  const std::vector<std::size_t>& calls_of(std::size_t layer) const { return calls_of_.at(layer); }
  /// The first output's node (the output of a model of one).
  std::size_t output_node() const { return output_nodes_.front(); }
  /// Per output, in the output structure's order: the node that computes it. Inputs are nodes
  /// 0 .. input_structure().size() - 1, in the input structure's order.
  const std::vector<std::size_t>& output_nodes() const { return output_nodes_; }
  /// Per output: which of its node's tensors it is (Keras' tensor_index; 0 but for a call that
  /// gives several).
  const std::vector<int>& output_indices() const { return output_indices_; }

  void build(const Shape& input_shape) override;
  bool built() const override { return true; }
  /// A model of one input and one output (ValueError naming its inputs and outputs otherwise).
  Output forward(const Tensor& x, const layers::CallContext& ctx) const override;
  /// Any model: one tensor per input, one Output per output, in the structures' orders.
  std::vector<Output> forward_all(std::span<const Tensor> xs, const layers::CallContext& ctx) const override;
  /// The first input's and the first output's shapes (those of a model of one).
  Shape input_shape() const override { return nodes_.front().output_shape; }
  Shape output_shape() const override { return nodes_[output_node()].output(output_indices_.front()); }
  /// Keras' table with a "Connected to" column ("conv2d[0][0]").
  std::string summary() const override;

 private:
  /// Whether node i and node i + 1 may run as one fused op: i + 1 reads node i alone, no other
  /// node reads node i, and both run in one mode.
  bool fuses_with_next(std::size_t i) const;
  /// masks[i]: Keras' mask of values[i] (undefined for none).
  /// values and masks hold one entry per tensor: node i's tensor k at slot_[i] + k. output_mask:
  /// the node's own mask (node_mask), computed before its call (Layer::call_with_output_mask).
  Tensor run_node(const Node& node, const std::vector<Tensor>& values, const std::vector<Tensor>& masks,
                  const Tensor& output_mask, const layers::CallContext& ctx, bool logits) const;
  /// A call that gives several tensors (Node::more_outputs): all of them, in Keras' order.
  std::vector<Tensor> run_node_outputs(const Node& node, const std::vector<Tensor>& values,
                                       const std::vector<Tensor>& masks, const layers::CallContext& ctx) const;
  /// The slot of node's input a (values, masks).
  std::size_t slot(const Node& node, std::size_t a) const {
    return slot_[node.inputs[a]] + static_cast<std::size_t>(node.input_index[a]);
  }
  /// The mask a single-input call gets (undefined: none): its own (CallKwargs::mask), else its input's.
  const Tensor& given_mask(const Node& node, const std::vector<Tensor>& values, const std::vector<Tensor>& masks) const;
  /// Keras' mask of `node`'s output given its inputs' (masks, by node; undefined: none): its
  /// layer's compute_mask of given_mask, or a list call's merge_mask.
  Tensor node_mask(const Node& node, const std::vector<Tensor>& values, const std::vector<Tensor>& masks) const;
  /// Runs the graph on one tensor per input; outs gets one Output per output. Under
  /// ctx.softmax_to_loss, a softmax output layer's softmax is left to the loss
  /// (Model::output_in_float32) where no later node reads that output.
  void run_graph(std::span<const Tensor> xs, const layers::CallContext& ctx, std::span<Output> outs) const;
  std::vector<Node> nodes_;  // the inputs first
  std::vector<std::size_t> output_nodes_;
  std::vector<int> output_indices_;
  std::vector<std::size_t> slot_;  // per node, where its tensors start in run_graph's values (node i's: i when every call gives one)
  std::size_t slots_ = 0;
  std::vector<int> output_of_;  // per slot, the output it is (-1: none)
  std::vector<std::vector<std::size_t>> calls_of_;  // per layer, its nodes
  // last_use_[i]: the last node that reads node i's output (0: none). forward() lets an output
  // go once that node ran.
  std::vector<std::size_t> last_use_;
};

}  // namespace lockstep
