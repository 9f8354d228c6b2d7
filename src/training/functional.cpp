#include "lockstep/training/functional.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/initializers.hpp"
#include "lockstep/layers/merge_layers.hpp"
#include "training/layer_config.hpp"
#include "training/summary_table.hpp"

namespace lockstep {

namespace detail {
struct KerasNode {
  layers::LayerPtr layer;
  std::vector<KerasTensor> inputs;  // the arguments, then initial states, then an attention mask or a mask
  Shape shape;                      // tensor 0's
  std::vector<Shape> more_shapes;   // a call that gives several tensors: those after the first
  bool list_call = false;
  bool return_attention_scores = false;  // CallKwargs
  std::size_t initial_states = 0;        // CallKwargs::initial_state's count
  bool use_causal_mask = false;  // CallKwargs
  bool attention_mask = false;   // inputs.back() is the call's attention mask
  bool call_mask = false;        // inputs.back() is the call's mask (CallKwargs::mask)
  std::optional<bool> training;  // CallKwargs
  bool auto_named = false;  // the layer had no name: the model names it
  std::uint64_t id = 0;     // creation order (Keras' node_index counts a layer's calls in it)

  // A chain of calls is a chain of shared pointers: letting go of it recursively, one frame per
  // call, overflowed the stack for a deep graph read from a file. Nodes no one else holds hand
  // their inputs to this loop before they go, so each destructor runs at depth one.
  ~KerasNode() {
    std::vector<std::shared_ptr<const KerasNode>> doomed;
    const auto take_inputs = [&](std::vector<KerasTensor>& xs) {
      for (auto& x : xs) doomed.push_back(std::move(x.node_));
    };
    take_inputs(inputs);
    while (!doomed.empty()) {
      std::shared_ptr<const KerasNode> n = std::move(doomed.back());
      doomed.pop_back();
      if (n && n.use_count() == 1) take_inputs(std::const_pointer_cast<KerasNode>(n)->inputs);
    }
  }
};
}  // namespace detail

namespace {
std::atomic<std::uint64_t> next_node_id{0};

std::string describe(const layers::Layer& l) { return "layer '" + l.name() + "' (" + l.class_name() + ")"; }

std::string shapes_str(const std::vector<KerasTensor>& xs) {
  std::string s;
  for (std::size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i].shape().str();
  return xs.size() == 1 ? s : "[" + s + "]";
}

// The input shape of each layer's first symbolic call, while the layer lives (Keras builds a
// layer at its first call, so a later call on another shape is refused there). A lookup, not a
// walk of the graph behind the call: that walk made a chain of n calls cost n^2.
class FirstCalls {
 public:
  // The shape `layer` was first called on, if it was.
  std::optional<Shape> first(const layers::LayerPtr& layer) {
    const std::lock_guard<std::mutex> hold(mutex_);
    const auto it = calls_.find(layer.get());
    if (it == calls_.end() || it->second.layer.expired()) return std::nullopt;
    return it->second.shape;
  }
  // Records a call that succeeded (a refused one leaves the layer free for another shape).
  void record(const layers::LayerPtr& layer, const Shape& shape) {
    const std::lock_guard<std::mutex> hold(mutex_);
    auto [it, fresh] = calls_.try_emplace(layer.get(), Record{layer, shape});
    if (!fresh && !it->second.layer.expired()) return;
    it->second = Record{layer, shape};  // a new layer at a dead one's address
    if (calls_.size() > 2 * live_after_prune_ + 1024) prune();
  }

 private:
  struct Record {
    std::weak_ptr<layers::Layer> layer;
    Shape shape;
  };
  void prune() {
    std::erase_if(calls_, [](const auto& kv) { return kv.second.layer.expired(); });
    live_after_prune_ = calls_.size();
  }
  std::mutex mutex_;
  std::unordered_map<const layers::Layer*, Record> calls_;
  std::size_t live_after_prune_ = 0;
};

FirstCalls& first_calls() {
  static FirstCalls calls;
  return calls;
}

layers::CallOptions call_options(const CallKwargs& kwargs) {
  return {.return_attention_scores = kwargs.return_attention_scores, .use_causal_mask = kwargs.use_causal_mask};
}

std::vector<Shape> shapes_of(const std::vector<KerasTensor>& xs) {
  std::vector<Shape> out;
  for (const auto& x : xs) out.push_back(x.shape());
  return out;
}
}  // namespace

const Shape& KerasTensor::shape() const {
  LOCKSTEP_CHECK(node_ != nullptr, "KerasTensor: an undefined (default-constructed) symbolic tensor has no shape");
  return index_ == 0 ? node_->shape : node_->more_shapes.at(static_cast<std::size_t>(index_ - 1));
}
const layers::LayerPtr& KerasTensor::layer() const {
  LOCKSTEP_CHECK(node_ != nullptr, "KerasTensor: an undefined (default-constructed) symbolic tensor has no layer");
  return node_->layer;
}
const std::vector<KerasTensor>& KerasTensor::inputs() const {
  LOCKSTEP_CHECK(node_ != nullptr, "KerasTensor: an undefined (default-constructed) symbolic tensor has no inputs");
  return node_->inputs;
}
bool KerasTensor::list_call() const { return node_ != nullptr && node_->list_call; }

KerasTensor Input(Shape shape, std::string name) {
  for (auto d : shape.dims())
    LOCKSTEP_CHECK(d > 0, "Input: shape ", shape.str(), " must be positive sizes per example (no batch dimension)");
  auto node = std::make_shared<detail::KerasNode>();
  node->auto_named = name.empty();
  node->layer = std::make_shared<layers::InputLayer>(shape, name.empty() ? "input_layer" : std::move(name));
  node->shape = layers::with_batch_dim(shape);
  node->id = next_node_id++;
  return KerasTensor(std::move(node));
}

KerasTensor call(const layers::LayerPtr& layer, const KerasTensor& x) { return call(layer, std::vector<KerasTensor>{x}); }

KerasTensor call(const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs) { return call(layer, xs, CallKwargs{}); }

KerasTensor call(const layers::LayerPtr& layer, const KerasTensor& x, const CallKwargs& kwargs) {
  return call(layer, std::vector<KerasTensor>{x}, kwargs);
}

KerasTensor call(const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs, const CallKwargs& kwargs) {
  std::vector<KerasTensor> outs = call_outputs(layer, xs, kwargs);
  LOCKSTEP_CHECK(outs.size() == 1, "lockstep::call: ", describe(*layer), " gives ", outs.size(), " tensors here, ",
                 layer->describe_outputs(call_options(kwargs)), ": use lockstep::call_outputs");
  return std::move(outs.front());
}

std::vector<KerasTensor> call_outputs(const layers::LayerPtr& layer, const KerasTensor& x, const CallKwargs& kwargs) {
  return call_outputs(layer, std::vector<KerasTensor>{x}, kwargs);
}

std::vector<KerasTensor> call_outputs(const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs,
                                      const CallKwargs& kwargs) {
  LOCKSTEP_CHECK(layer != nullptr, "lockstep::call: the layer is null");
  LOCKSTEP_CHECK(!xs.empty(), "lockstep::call: ", layer->class_name(), " is called on an empty list of tensors");
  for (const auto& x : xs)
    LOCKSTEP_CHECK(x.defined(), "lockstep::call: ", layer->class_name(),
                   " is called on an undefined symbolic tensor (use lockstep::Input or a layer's output)");
  LOCKSTEP_CHECK(dynamic_cast<const layers::InputLayer*>(layer.get()) == nullptr,
                 "lockstep::call: an InputLayer cannot be called; use lockstep::Input(shape) for a model's input");
  auto node = std::make_shared<detail::KerasNode>();
  // Named now, for this call's messages; the model numbers the names when it is made.
  if (layer->name().empty()) {
    layer->set_name(detail::snake_case(layer->class_name()));
    node->auto_named = true;
  }
  const auto* merge = dynamic_cast<const layers::MergeLayer*>(layer.get());
  node->list_call = merge != nullptr;
  LOCKSTEP_CHECK(merge != nullptr || xs.size() == 1, describe(*layer), " takes one input but is called on a list of ",
                 xs.size(), ": ", shapes_str(xs), " (merge layers such as Add take lists)");
  const Shape& in = xs.front().shape();
  if (merge == nullptr) {
    if (layer->built())
      LOCKSTEP_CHECK(layer->input_shape().tail() == in.tail(), describe(*layer), " was built for input shape ",
                     layer->input_shape().str(), " and cannot be called on ", in.str());
    if (const auto before = first_calls().first(layer))
      LOCKSTEP_CHECK(before->tail() == in.tail(), describe(*layer), " is called on ", in.str(),
                     " but was called before on ", before->str(), " (a shared layer takes inputs of one shape)");
  }
  try {
    node->shape = merge ? merge->merge_output_shape(shapes_of(xs)) : layer->compute_output_shape(in);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("layer '" + layer->name() + "'") != std::string::npos) throw ValueError("lockstep::call: " + what);
    throw ValueError("lockstep::call: " + describe(*layer) + " cannot be called on " + shapes_str(xs) + ": " + what);
  }
  if (merge == nullptr) first_calls().record(layer, in);
  node->layer = layer;
  node->inputs = xs;
  node->training = kwargs.training;
  // The keyword arguments only some layers' calls take (a recurrent layer's initial_state,
  // MultiHeadAttention's): the layer judges them (Layer::check_call_arguments), by their shapes.
  layers::CallSignature signature{.inputs = shapes_of(xs), .options = call_options(kwargs)};
  if (const auto* states = kwargs.initial_state) {
    signature.initial_state.emplace();
    for (const auto& h : *states) {
      LOCKSTEP_CHECK(h.defined(), "lockstep::call: ", describe(*layer), "'s initial_state holds an undefined tensor");
      signature.initial_state->push_back(h.shape());
    }
  }
  if (const KerasTensor* mask = kwargs.attention_mask) {
    LOCKSTEP_CHECK(mask->defined(), "lockstep::call: ", describe(*layer), "'s attention_mask is undefined");
    signature.attention_mask = mask->shape();
  }
  try {
    layer->check_call_arguments(signature);
  } catch (const Error& e) {
    throw ValueError(std::string("lockstep::call: ") + e.what());
  }
  if (const auto* states = kwargs.initial_state) {
    node->inputs.insert(node->inputs.end(), states->begin(), states->end());
    node->initial_states = states->size();
  }
  node->return_attention_scores = kwargs.return_attention_scores;
  node->use_causal_mask = kwargs.use_causal_mask;
  if (const KerasTensor* mask = kwargs.attention_mask) {
    node->attention_mask = true;
    node->inputs.push_back(*mask);
  }
  if (const KerasTensor* mask = kwargs.mask) {
    LOCKSTEP_CHECK(merge == nullptr && layer->call_takes_mask(), "lockstep::call: ", describe(*layer),
                   " takes no mask (Softmax and GlobalAveragePooling1D do)");
    LOCKSTEP_CHECK(mask->defined(), "lockstep::call: ", describe(*layer), "'s mask is undefined");
    try {
      layer->check_call_mask(mask->shape(), in);
    } catch (const Error& e) {
      throw ValueError(std::string("lockstep::call: ") + e.what());
    }
    node->call_mask = true;
    node->inputs.push_back(*mask);
  }
  // A call of several tensors (Layer::output_count): the layer's own shapes for those after the first.
  node->more_shapes = layer->more_output_shapes(shapes_of(xs), call_options(kwargs));
  node->id = next_node_id++;
  const std::size_t count = 1 + node->more_shapes.size();
  std::shared_ptr<const detail::KerasNode> made = std::move(node);
  std::vector<KerasTensor> outs;
  for (std::size_t k = 0; k < count; ++k) outs.push_back(KerasTensor(made, static_cast<int>(k)));
  return outs;
}

KerasTensors::KerasTensors(const KerasTensor& one) : flat{one} {}
KerasTensors::KerasTensors(std::vector<KerasTensor> list) : form(Structure::Form::kList), flat(std::move(list)) {}
KerasTensors::KerasTensors(const std::map<std::string, KerasTensor>& dict) : form(Structure::Form::kDict) {
  for (const auto& [key, x] : dict) {
    keys.push_back(key);
    flat.push_back(x);
  }
}

Functional::Functional(const KerasTensors& inputs, const KerasTensors& outputs, std::string name,
                       std::optional<std::uint64_t> seed)
    : Model(std::move(name)) {
  if (seed) seed_ = *seed;
  LOCKSTEP_CHECK(!inputs.flat.empty() && !outputs.flat.empty(), "Functional '", this->name(),
                 "': a model needs at least one input and one output");
  for (const auto* xs : {&inputs.flat, &outputs.flat})
    for (const auto& x : *xs)
      LOCKSTEP_CHECK(x.defined(), "Functional '", this->name(),
                     "': inputs and outputs must be symbolic tensors (lockstep::Input and layer calls)");
  std::map<const detail::KerasNode*, std::size_t> input_index;
  for (const auto& x : inputs.flat) {
    LOCKSTEP_CHECK(x.inputs().empty() && dynamic_cast<const layers::InputLayer*>(x.layer().get()) != nullptr,
                   "Functional '", this->name(), "': inputs must be a lockstep::Input(shape), got the output of ",
                   describe(*x.layer()));
    LOCKSTEP_CHECK(input_index.emplace(x.node(), input_index.size()).second, "Functional '", this->name(), "': ",
                   describe(*x.layer()), " is given twice as an input");
  }
  const auto is_input = [&](const detail::KerasNode* n) { return input_index.count(n) != 0; };
  const auto input_names = [&] {
    std::string s;
    for (const auto& x : inputs.flat) s += (s.empty() ? "" : ", ") + describe(*x.layer()) + " of shape " + x.shape().str();
    return inputs.flat.size() == 1 ? "the model's input " + s : "one of the model's inputs (" + s + ")";
  };

  // Keras' map_graph: a walk from the output that stops at the input gives the nodes in a
  // topological order (post-order) and each layer's first visit (pre-order, Keras' tie-break).
  std::vector<const detail::KerasNode*> order;
  std::map<const detail::KerasNode*, std::size_t> index;
  std::map<const layers::Layer*, std::size_t> first_visit;
  std::set<const detail::KerasNode*> in_progress;
  // Iterative (a chain of 16,000 calls overflowed the stack as a recursion): a frame is a node
  // and the next of its inputs to visit.
  std::vector<std::pair<const detail::KerasNode*, std::size_t>> stack;
  const auto finish = [&](const detail::KerasNode* n) {
    index.emplace(n, order.size());
    order.push_back(n);
  };
  const auto enter = [&](const detail::KerasNode* n) {
    if (index.count(n)) return;
    LOCKSTEP_CHECK(!in_progress.count(n), "Functional '", this->name(), "': the graph has a cycle at ", describe(*n->layer));
    LOCKSTEP_CHECK(order.size() + in_progress.size() < kMaxNodes, "Functional '", this->name(), "': the graph has more "
                   "than ", kMaxNodes, " layer calls (nodes), lockstep's bound for a model");
    first_visit.try_emplace(n->layer.get(), first_visit.size());
    if (is_input(n)) return finish(n);
    LOCKSTEP_CHECK(!n->inputs.empty(), "Functional '", this->name(), "': the output is not reachable from the inputs "
                   "alone: it depends on ", describe(*n->layer), " of shape ", n->shape.str(),
                   ", which is not ", input_names());
    in_progress.insert(n);
    stack.emplace_back(n, 0);
  };
  for (const auto& out : outputs.flat) {
    enter(out.node());
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->inputs.size()) {
        enter(n->inputs[next++].node());  // may grow the stack: n and next are not used after
        continue;
      }
      const auto* done = n;
      stack.pop_back();
      in_progress.erase(done);
      finish(done);
    }
  }
  for (const auto& x : inputs.flat)
    LOCKSTEP_CHECK(index.count(x.node()), "Functional '", this->name(), "': the input ", describe(*x.layer()),
                   " is not used by any output");
  // The inputs first, in the inputs' order (they have no inputs, so this keeps the order topological).
  std::stable_partition(order.begin(), order.end(), is_input);
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(input_index.size()),
            [&](const auto* a, const auto* b) { return input_index.at(a) < input_index.at(b); });
  for (std::size_t i = 0; i < order.size(); ++i) index[order[i]] = i;

  // Depths (Keras': 0 at the output, a node deeper than all its consumers; a layer as deep as
  // its deepest node), then layers by decreasing depth, ties by first visit.
  std::vector<int> depth(order.size(), 0);
  for (std::size_t i = order.size(); i-- > 0;)
    for (const auto& x : order[i]->inputs) {
      int& d = depth[index.at(x.node())];
      d = std::max(d, depth[i] + 1);
    }
  std::map<const layers::Layer*, int> layer_depth;
  std::map<const layers::Layer*, layers::LayerPtr> owner;
  for (std::size_t i = 0; i < order.size(); ++i) {
    int& d = layer_depth[order[i]->layer.get()];
    d = std::max(d, depth[i]);
    owner[order[i]->layer.get()] = order[i]->layer;
  }
  std::vector<layers::LayerPtr> sorted;
  for (const auto& [l, ptr] : owner) sorted.push_back(ptr);
  std::sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) {
    const int da = layer_depth.at(a.get()), db = layer_depth.at(b.get());
    return da != db ? da > db : first_visit.at(a.get()) < first_visit.at(b.get());
  });
  set_layers(std::move(sorted));
  std::map<const layers::Layer*, std::size_t> layer_index;
  for (std::size_t i = 0; i < layers_.size(); ++i) layer_index[layers_[i].get()] = i;

  // Unnamed layers are numbered per class in layer order, around the names users gave.
  std::set<const layers::Layer*> auto_named;
  for (const auto* n : order)
    if (n->auto_named && !n->layer->built()) auto_named.insert(n->layer.get());
  std::set<std::string> taken;
  for (const auto& l : layers_)
    if (!auto_named.count(l.get())) {
      LOCKSTEP_CHECK(taken.insert(l->name()).second, "Functional '", this->name(), "': two layers are named '",
                     l->name(), "'; layer names must be unique within a model");
    }
  std::map<std::string, int> used;
  for (const auto& l : layers_) {
    if (!auto_named.count(l.get())) continue;
    const std::string base = l->class_name() == "InputLayer" ? "input_layer" : detail::snake_case(l->class_name());
    for (int& k = used[base];; ++k) {
      const std::string candidate = k == 0 ? base : base + "_" + std::to_string(k);
      if (taken.insert(candidate).second) {
        l->set_name(candidate);
        break;
      }
    }
  }

  // Build every layer in layer order with its layer_seed (as Sequential builds its layers),
  // on the inputs of its first call; every later call must have the same input shape.
  std::vector<const detail::KerasNode*> first_call(layers_.size(), nullptr);
  for (const auto* n : order) {
    auto& f = first_call[layer_index.at(n->layer.get())];
    if (f == nullptr || n->id < f->id) f = n;
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto* n = first_call[i];
    auto& l = *layers_[i];
    try {
      if (is_input(n)) {
        l.build(n->shape, layer_seed(i));
      } else if (auto* merge = dynamic_cast<layers::MergeLayer*>(&l)) {
        std::vector<Shape> shapes = shapes_of(n->inputs);
        if (n->attention_mask) shapes.pop_back();
        merge->build_merge(shapes, layer_seed(i));
      } else {
        l.build(n->inputs.front().shape(), layer_seed(i));
      }
    } catch (const Error& e) {
      throw ValueError("Functional '" + this->name() + "': " + describe(l) + " cannot be built for " +
                       (is_input(n) ? n->shape.str() : shapes_str(n->inputs)) + ": " + e.what());
    }
  }

  std::map<const layers::Layer*, int> calls;
  std::vector<const detail::KerasNode*> by_id = order;
  std::sort(by_id.begin(), by_id.end(), [](const auto* a, const auto* b) { return a->id < b->id; });
  std::map<const detail::KerasNode*, int> index_in_layer;
  for (const auto* n : by_id) index_in_layer[n] = calls[n->layer.get()]++;
  for (const auto* n : order) {
    Node node{.layer = layer_index.at(n->layer.get()), .inputs = {}, .input_index = {}, .list_call = n->list_call,
              .use_causal_mask = n->use_causal_mask, .attention_mask = n->attention_mask,
              .call_mask = n->call_mask, .return_attention_scores = n->return_attention_scores,
              .initial_states = n->initial_states, .training = n->training, .output_shape = n->shape,
              .more_outputs = n->more_shapes, .index_in_layer = index_in_layer.at(n)};
    for (const auto& x : n->inputs) {
      node.inputs.push_back(index.at(x.node()));
      node.input_index.push_back(x.index());
    }
    if (!is_input(n) && !n->list_call)
      LOCKSTEP_CHECK(n->inputs.front().shape().tail() == layers_[node.layer]->input_shape().tail(), "Functional '",
                     this->name(), "': ", describe(*layers_[node.layer]), " is called on ", n->inputs.front().shape().str(),
                     " and on ", layers_[node.layer]->input_shape().str(), " (a shared layer takes inputs of one shape)");
    nodes_.push_back(std::move(node));
  }
  slot_.clear();
  for (const auto& node : nodes_) {
    slot_.push_back(slots_);
    slots_ += node.outputs();
  }
  calls_of_.assign(layers_.size(), {});
  for (std::size_t i = 0; i < nodes_.size(); ++i) calls_of_[nodes_[i].layer].push_back(i);
  last_use_.assign(nodes_.size(), 0);
  for (std::size_t i = 1; i < nodes_.size(); ++i)
    for (std::size_t j : nodes_[i].inputs) last_use_[j] = i;

  // The structures: entries named by the dict's keys, else by their layers (Keras' input_names
  // and output_names; a call's tensor k > 0, "<layer>_<k>"); the names must differ, for the logs
  // and the losses that name them.
  const auto structure = [&](const KerasTensors& xs, const char* what) {
    Structure st{xs.form, xs.keys};
    if (xs.form != Structure::Form::kDict)
      for (const auto& x : xs.flat) {
        std::string entry = x.layer()->name();
        if (x.index() > 0) entry.append("_").append(std::to_string(x.index()));
        st.names.push_back(std::move(entry));
      }
    std::set<std::string> seen;
    for (const auto& n : st.names)
      LOCKSTEP_CHECK(seen.insert(n).second, "Functional '", this->name(), "': two ", what, "s are named '", n,
                     "' (an output's name is its layer's; use a dict of outputs to name them)");
    return st;
  };
  inputs_ = structure(inputs, "input");
  outputs_ = structure(outputs, "output");
  output_of_.assign(slots_, -1);
  for (std::size_t k = 0; k < outputs.flat.size(); ++k) {
    const std::size_t node = index.at(outputs.flat[k].node());
    output_nodes_.push_back(node);
    output_indices_.push_back(outputs.flat[k].index());
    int& of = output_of_[slot_[node] + static_cast<std::size_t>(outputs.flat[k].index())];
    if (of < 0) of = static_cast<int>(k);
  }
}

void Functional::build(const Shape& input_shape) {
  LOCKSTEP_CHECK(input_shape.rank() == this->input_shape().rank() && input_shape.tail() == this->input_shape().tail(),
                 "Functional '", name(), "' takes inputs of shape ", this->input_shape().str(), ", not ", input_shape.str(),
                 inputs_.single() ? "" : " (its first input, '" + inputs_.names.front() + "')");
}

Tensor Functional::run_node(const Node& node, const std::vector<Tensor>& values, const std::vector<Tensor>& masks,
                            const Tensor& output_mask, const layers::CallContext& ctx, bool logits) const {
  if (node.list_call || node.initial_states > 0) return run_node_outputs(node, values, masks, ctx).front();
  const layers::Layer& l = *layers_[node.layer];
  const Tensor& x = values[slot(node, 0)];
  const Tensor& mask = given_mask(node, values, masks);
  if (logits) return l.call_logits(x, ctx);
  return l.call_with_output_mask(x, mask, output_mask, ctx);
}

std::vector<Tensor> Functional::run_node_outputs(const Node& node, const std::vector<Tensor>& values,
                                                 const std::vector<Tensor>& masks, const layers::CallContext& ctx) const {
  layers::CallArguments args{
      .options = {.return_attention_scores = node.return_attention_scores, .use_causal_mask = node.use_causal_mask}};
  std::vector<Tensor> xs;
  for (std::size_t a = 0; a < node.arguments(); ++a) {
    xs.push_back(values[slot(node, a)]);
    args.masks.push_back(node.list_call ? masks[slot(node, a)] : given_mask(node, values, masks));
  }
  for (std::size_t a = node.arguments(); a < node.arguments() + node.initial_states; ++a)
    args.initial_state.push_back(values[slot(node, a)]);
  if (node.attention_mask) args.attention_mask = values[slot(node, node.inputs.size() - 1)];
  return layers_[node.layer]->call_outputs(xs, args, ctx);
}

bool Functional::fuses_with_next(std::size_t i) const {
  const Node& node = nodes_[i];
  const Node& next = nodes_[i + 1];
  // Nodes are in topological order, so only later nodes read node i.
  return !node.list_call && !next.list_call && node.more_outputs.empty() &&
         next.inputs.size() == 1 && next.inputs.front() == i && last_use_[i] == i + 1 && node.training == next.training;
}

Model::Output Functional::forward(const Tensor& x, const layers::CallContext& ctx) const {
  LOCKSTEP_CHECK(inputs_.size() == 1 && outputs_.size() == 1, "Functional '", name(), "' has ", inputs_.size(),
                 " input(s) (", inputs_.joined(), ") and ", outputs_.size(), " output(s) (", outputs_.joined(),
                 "): give one tensor per input (predict / fit / evaluate with lists, forward_all)");
  const Shape& want = input_shape();
  LOCKSTEP_CHECK(x.rank() == want.rank() && x.shape().tail() == want.tail(), "Functional '", name(),
                 "' expects input shape ", want.str(), " but received ", x.shape().str());
  Output out;
  run_graph({&x, 1}, ctx, {&out, 1});
  return out;
}

std::vector<Model::Output> Functional::forward_all(std::span<const Tensor> xs, const layers::CallContext& ctx) const {
  LOCKSTEP_CHECK(xs.size() == inputs_.size(), "Functional '", name(), "' takes ", inputs_.size(), " input(s) (",
                 inputs_.joined(), "), got ", xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Shape& want = nodes_[i].output_shape;
    LOCKSTEP_CHECK(xs[i].rank() == want.rank() && xs[i].shape().tail() == want.tail(), "Functional '", name(),
                   "': input '", inputs_.names[i], "' expects shape ", want.str(), " but received ", xs[i].shape().str());
  }
  std::vector<Output> outs(outputs_.size());
  run_graph(xs, ctx, outs);
  return outs;
}

const Tensor& Functional::given_mask(const Node& node, const std::vector<Tensor>& values,
                                    const std::vector<Tensor>& masks) const {
  return node.call_mask ? values[slot(node, node.inputs.size() - 1)] : masks[slot(node, 0)];
}

Tensor Functional::node_mask(const Node& node, const std::vector<Tensor>& values,
                             const std::vector<Tensor>& masks) const {
  if (!node.list_call)
    return layers_[node.layer]->compute_mask(values[slot(node, 0)], given_mask(node, values, masks));
  std::vector<Tensor> ms_xs, ms;
  for (std::size_t a = 0; a < node.arguments(); ++a) {
    ms_xs.push_back(values[slot(node, a)]);
    ms.push_back(masks[slot(node, a)]);
  }
  return dynamic_cast<const layers::MergeLayer&>(*layers_[node.layer]).merge_mask(ms_xs, ms);
}

void Functional::run_graph(std::span<const Tensor> xs, const layers::CallContext& ctx,
                           std::span<Output> outs) const {
  // One entry per tensor: node i's tensor k at slot_[i] + k (slot_[i] == i when every call gives one).
  std::vector<Tensor> values(slots_), masks(slots_);
  for (std::size_t i = 0; i < xs.size(); ++i) values[slot_[i]] = xs[i];
  // The one place that decides which mode a call runs in: its own training= (Keras'
  // layer(x, training=False)) over the mode the model runs in. A layer then reads ctx.training
  // (a frozen BatchNormalization infers in training mode as well: its own rule).
  layers::CallContext inference = ctx, training = ctx;
  inference.training = false;
  training.training = true;
  const auto ctx_of = [&](const Node& n) -> const layers::CallContext& {
    return !n.training ? ctx : *n.training ? training : inference;
  };
  // An output ends as every model's output ends (output_in_float32); a later node reads that, so
  // only an output that no node reads may leave its softmax to the loss (as Sequential's does):
  // the one rule for a model of one output and for each output of several.
  const auto finish_output = [&](std::size_t i) {
    const std::size_t s = slot_[i];
    Output& o = outs[static_cast<std::size_t>(output_of_[s])];
    const bool to_loss = ctx.softmax_to_loss && last_use_[i] == 0;
    if (i < xs.size()) o = output_in_float32(*layers_[nodes_[i].layer], [&](bool) { return xs[i]; });
    else {
      const Node& n = nodes_[i];
      const bool masked = !n.list_call && given_mask(n, values, masks).defined();
      const auto run = [&](bool logits) { return run_node(n, values, masks, masks[s], ctx_of(n), logits); };
      o = output_in_float32(*layers_[n.layer], run, to_loss, masked);
    }
    o.mask = masks[s];
    values[s] = o.output;
  };
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (output_of_[slot_[i]] >= 0) finish_output(i);
  // A node's output is let go after its last consumer ran: holding every one until the end kept
  // a whole forward pass alive (ResNet-20 evaluating at batch 1024 peaked at 5 GB). A tape still
  // holds what backward needs.
  for (std::size_t i = xs.size(); i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    const std::size_t ran = i;
    const std::size_t s = slot_[i];
    if (!node.more_outputs.empty()) {
      // A call that gives several tensors: tensor 0's mask is the layer's compute_mask, the
      // others' its more_outputs_mask.
      masks[s] = node_mask(node, values, masks);
      for (std::size_t k = 1; k < node.outputs(); ++k) masks[s + k] = layers_[node.layer]->more_outputs_mask(masks[s]);
      std::vector<Tensor> got = run_node_outputs(node, values, masks, ctx_of(node));
      for (std::size_t k = 0; k < got.size(); ++k) {
        values[s + k] = std::move(got[k]);
        if (const int o = output_of_[s + k]; o >= 0) {
          Output& out = outs[static_cast<std::size_t>(o)];
          out = output_in_float32(*layers_[node.layer], [&](bool) { return values[s + k]; });
          out.mask = masks[s + k];
          values[s + k] = out.output;
        }
      }
    } else if (output_of_[s] >= 0 && last_use_[i] == 0) {
      masks[s] = node_mask(node, values, masks);
      finish_output(i);
    } else {
      // Node i and the next one as one fused op (Conv2D then MaxPooling2D) where the next is
      // node i's only reader and not an output: node i's own output then never exists.
      Tensor fused;
      if (i + 1 < nodes_.size() && output_of_[s] < 0 && output_of_[slot_[i + 1]] < 0 && fuses_with_next(i) &&
          !masks[slot(node, 0)].defined())
        fused = layers_[node.layer]->call_then(*layers_[nodes_[i + 1].layer], values[slot(node, 0)], ctx_of(node));
      masks[s] = node_mask(node, values, masks);
      if (fused.defined()) values[slot_[++i]] = std::move(fused);
      else if (output_of_[s] >= 0) finish_output(i);
      else values[s] = run_node(node, values, masks, masks[s], ctx_of(node), false);
    }
    for (std::size_t j : node.inputs)
      if (last_use_[j] == ran)
        for (std::size_t k = slot_[j]; k < slot_[j] + nodes_[j].outputs(); ++k) values[k] = masks[k] = Tensor();
  }
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const int o = output_of_[slot_[output_nodes_[k]] + static_cast<std::size_t>(output_indices_[k])];
    if (static_cast<std::size_t>(o) != k) outs[k] = outs[static_cast<std::size_t>(o)];
  }
}

std::string Functional::summary() const {
  std::vector<detail::SummaryRow> rows;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    detail::SummaryRow row{layers_[i].get(), {}, {}, {}};
    const auto& calls = calls_of_[i];
    if (!calls.empty()) {
      row.output_shape = nodes_[calls.front()].output_shape;
      row.more_shapes = nodes_[calls.front()].more_outputs;
    }
    for (std::size_t c : calls)
      for (std::size_t a = 0; a < nodes_[c].inputs.size(); ++a) {
        const auto& src = nodes_[nodes_[c].inputs[a]];
        row.connected_to.push_back(layers_[src.layer]->name() + "[" + std::to_string(src.index_in_layer) + "][" +
                                   std::to_string(nodes_[c].input_index[a]) + "]");
      }
    rows.push_back(std::move(row));
  }
  return detail::summary_table(*this, rows, /*connected=*/true);
}

}  // namespace lockstep
