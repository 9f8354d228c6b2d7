#include "training/functional_config.hpp"

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/layers/recurrent_layers.hpp"
#include "training/layer_config.hpp"

namespace lockstep::detail {

namespace {
using nlohmann::json;

// Keras' keras_history of node's tensor `index` (its tensor_index: 0 but for a call that gives several).
json history(const Functional& m, std::size_t node, int index) {
  const auto& n = m.nodes()[node];
  return json::array({m.layers()[n.layer]->name(), n.index_in_layer, index});
}

json keras_tensor(const Functional& m, std::size_t node, int index) {
  return {{"class_name", "__keras_tensor__"},
          {"config",
           {{"shape", shape_to_json(m.nodes()[node].output(static_cast<std::size_t>(index)))},
            {"dtype", "float32"},
            {"keras_history", history(m, node, index)}}}};
}

[[noreturn]] void fail(const std::string& source, const std::string& what) { throw IOError(source + ": " + what); }

// Refused before any layer is made: a config far beyond any real model (a 425 KB file held a
// chain of 16,000 calls) costs time and memory in proportion to its calls.
void check_size(const json& layer_list, const std::string& source) {
  std::size_t calls = 0;  // nodes: an InputLayer's tensor, and each inbound node of the others
  for (const auto& entry : layer_list) {
    if (!entry.is_object()) continue;  // refused by name further on
    if (entry.value("class_name", json()) == json("InputLayer")) ++calls;
    else if (entry.value("inbound_nodes", json()).is_array()) calls += entry.at("inbound_nodes").size();
  }
  if (layer_list.size() > Functional::kMaxNodes || calls > Functional::kMaxNodes)
    fail(source, "the Functional config has " + std::to_string(calls) + " layer calls (nodes) in " +
                     std::to_string(layer_list.size()) + " layers, more than lockstep's bound of " +
                     std::to_string(Functional::kMaxNodes) + " for a model");
}

// The training= Keras writes on a call given none (its call's default, where that is not None):
// Dropout's and the recurrent layers' False, the image preprocessing layers' True
// (BaseImagePreprocessingLayer.call(data, training=True)), on every one of their calls. That value in a file
// says nothing about the call (read as the call's own, a loaded LSTM's dropout would never act in fit).
std::optional<bool> keras_default_training(const layers::Layer& l) {
  if (dynamic_cast<const layers::DropoutLayer*>(&l) != nullptr) return false;  // call(inputs, training=False)
  if (dynamic_cast<const layers::RecurrentLayer*>(&l) != nullptr) return false;  // RNN.call(..., training=False)
  // BaseImagePreprocessingLayer.call(data, training=True): RandomFlip, Resizing, CenterCrop.
  if (dynamic_cast<const layers::RandomFlipLayer*>(&l) != nullptr || dynamic_cast<const layers::ResizingLayer*>(&l) ||
      dynamic_cast<const layers::CenterCropLayer*>(&l))
    return true;
  return std::nullopt;
}

// [layer name, node index, tensor index] of a keras tensor (or of an input_layers entry). A layer's
// call makes tensor 0; a nested model's, one per output.
using Reference = std::tuple<std::string, int, int>;
Reference reference(const json& h, const std::string& source) {
  if (!h.is_array() || h.size() != 3 || !h[0].is_string() || !h[1].is_number_integer() || !h[2].is_number_integer() ||
      h[2].get<std::int64_t>() < 0 || h[2].get<std::int64_t>() >= static_cast<std::int64_t>(Functional::kMaxNodes))
    fail(source, "a tensor reference must be [layer name, node index, tensor index], got " + h.dump().substr(0, 200));
  return {h[0].get<std::string>(), h[1].get<int>(), h[2].get<int>()};
}
// A call argument of layer `layer`: a symbolic tensor, {"class_name": "__keras_tensor__",
// "config": {"keras_history": [...]}}, read as its reference.
Reference tensor_reference(const json& arg, const std::string& layer, const std::string& source) {
  if (!arg.is_object() || arg.value("class_name", json()) != json("__keras_tensor__") || !arg.contains("config") ||
      !arg.at("config").is_object())
    fail(source, "layer '" + layer + "': an argument is not a symbolic tensor: " + arg.dump().substr(0, 200));
  return reference(arg.at("config").value("keras_history", json()), source);
}

// Keras 3 writes the ops that its layers' compute_mask ran on symbolic tensors as nodes of the
// graph (module keras.src.ops.numpy), whose output a later layer takes as its `mask` keyword:
//   Embedding(mask_zero=True): not_equal(ids, 0);
//   Masking(mask_value): any(not_equal(x, mask_value), axis=-1);
//   Add and the other element-wise merges (base_merge.py): logical_or(mask, mask);
//   Concatenate (concatenate.py): per input its mask broadcast to the input (logical_or(
//     expand_dims(mask, -1), zeros_like(x))) or ones_like(x) where it has none, concatenate(...,
//     axis), any(axis=-1).
// lockstep's layers compute those masks themselves (Layer::compute_mask, MergeLayer::merge_mask)
// and carry them from layer to layer, so such a node is read as a record of a mask and nothing
// else: true for one of these ops in the form Keras writes, an IOError naming any other op (or
// this one in another form). `masks`: the nodes read so far as masks.
using MaskMakers = std::set<std::pair<Reference, double>>;
// The calls whose masks lockstep's layers compute, Embedding(mask_zero=True) and Masking: the
// tensor each is called on and the value its mask compares it to (0, mask_value). Keras' records
// of masks start from a not_equal of one of them; a not_equal of anything else is a mask the
// model computes with ops, which lockstep does not run.
MaskMakers mask_makers(const json& layer_list, const std::string& source) {
  MaskMakers makers;
  for (const auto& entry : layer_list) {
    if (!entry.is_object() || !entry.value("config", json()).is_object() ||
        !entry.value("inbound_nodes", json()).is_array())
      continue;  // refused by name further on
    const std::string cls = entry.value("class_name", json()).is_string() ? entry.at("class_name").get<std::string>() : "";
    const json& config = entry.at("config");
    std::optional<double> value;
    if (cls == "Embedding" && config.value("mask_zero", json(false)) == json(true)) value = 0.0;
    if (cls == "Masking" && config.value("mask_value", json(0.0)).is_number()) value = config.value("mask_value", 0.0);
    if (!value) continue;
    for (const auto& node : entry.at("inbound_nodes")) {
      const json& args = node.is_object() ? node.value("args", json()) : json();
      if (!args.is_array() || args.empty()) continue;
      try {
        makers.emplace(tensor_reference(args[0], cls, source), *value);
      } catch (const IOError&) {
        // the call is refused by name when it is read
      }
    }
  }
  return makers;
}

bool mask_op(const json& entry, const std::string& name, const json& nodes, const std::set<std::string>& masks,
             const MaskMakers& makers, const std::string& source) {
  const std::string cls = entry.value("class_name", json()).is_string() ? entry.at("class_name").get<std::string>() : "";
  const json& module = entry.value("module", json());
  const bool op_module = module.is_string() && module.get<std::string>().starts_with("keras.src.ops");
  static const std::set<std::string> kOps = {"NotEqual", "Any", "ExpandDims", "ZerosLike", "OnesLike", "LogicalOr"};
  if (!kOps.count(cls) && !op_module) return false;
  const json& args = nodes.size() == 1 && nodes[0].is_object() ? nodes[0].value("args", json()) : json();
  const json& config = entry.value("config", json::object());
  const auto is_tensor = [&](const json& a) { return (void)tensor_reference(a, name, source), true; };
  const auto is_mask = [&](const json& a) { return masks.count(std::get<0>(tensor_reference(a, name, source))) > 0; };
  const auto config_is = [&](const char* key, const json& want) {
    return config.is_object() && config.value(key, want) == want;
  };
  const auto unary = [&](const auto& arg_ok) { return args.is_array() && args.size() == 1 && arg_ok(args[0]); };
  bool keras_form = false;
  std::string form;
  if (cls == "NotEqual") {
    form = "not_equal(x, a number)";
    keras_form = args.is_array() && args.size() == 2 && is_tensor(args[0]) && args[1].is_number();
    if (keras_form && !makers.count({tensor_reference(args[0], name, source), args[1].get<double>()}))
      fail(source, "'" + name + "' (NotEqual) is not_equal(x, " + args[1].dump() + ") of a tensor that no "
                       "Embedding(mask_zero=True) or Masking(mask_value=" + args[1].dump() + ") is called on: a mask "
                       "the model computes with ops, which lockstep does not run (it carries its layers' masks itself)");
  } else if (cls == "Any") {
    form = "any(mask, axis=-1, keepdims=False)";
    keras_form = unary(is_mask) && config_is("axis", -1) && config_is("keepdims", false);
  } else if (cls == "ExpandDims") {
    form = "expand_dims(mask, axis=-1)";
    keras_form = unary(is_mask) && config_is("axis", -1);
  } else if (cls == "ZerosLike" || cls == "OnesLike") {
    form = cls == "ZerosLike" ? "zeros_like(x)" : "ones_like(x)";
    keras_form = unary(is_tensor);
  } else if (cls == "LogicalOr") {
    form = "logical_or(mask, mask)";
    keras_form = args.is_array() && args.size() == 2 && is_mask(args[0]) && is_mask(args[1]);
  } else if (cls == "Concatenate") {
    form = "concatenate([mask, ...], axis)";
    keras_form = unary([&](const json& list) {
      if (!list.is_array() || list.size() < 2) return false;
      for (const auto& a : list)
        if (!is_mask(a)) return false;
      return true;
    }) && config.is_object() && config.value("axis", json()).is_number_integer();
  } else {
    fail(source, "'" + name + "' (" + cls + ") is an op of " + module.get<std::string>() +
                     "; lockstep reads ops only as Keras' records of masks (NotEqual, Any, ExpandDims, ZerosLike, "
                     "OnesLike, LogicalOr, Concatenate), not this one");
  }
  if (!keras_form)
    fail(source, "'" + name + "' (" + cls + ") is read as a record of a mask, " + form + ", but it is " +
                     nodes.dump().substr(0, 200) + " with config " + config.dump().substr(0, 200));
  return true;
}
}  // namespace

json functional_config(const Functional& m, const LayerToJson& layer_json) {
  json list = json::array();
  for (std::size_t i = 0; i < m.layers().size(); ++i) {
    json entry = layer_json(*m.layers()[i]);
    entry["name"] = m.layers()[i]->name();
    json inbound = json::array();
    for (std::size_t c : m.calls_of(i)) {
      const auto& n = m.nodes()[c];
      if (n.inputs.empty()) continue;
      json args = json::array();
      const auto input = [&](std::size_t a) { return keras_tensor(m, n.inputs[a], n.input_index[a]); };
      for (std::size_t a = 0; a < n.arguments(); ++a) args.push_back(input(a));
      // Keras calls a merge layer on one list (Add()([a, b])), some on positional tensors
      // (MultiHeadAttention: mha(query, value)).
      const bool one_list = n.list_call && !m.layers()[i]->keras_positional_call();
      json kwargs = json::object();
      if (n.use_causal_mask) kwargs["use_causal_mask"] = true;
      if (n.return_attention_scores) kwargs["return_attention_scores"] = true;
      if (n.initial_states) {  // Keras' rnn(x, initial_state=[h, c]): a list of tensors
        json states = json::array();
        for (std::size_t a = n.arguments(); a < n.arguments() + n.initial_states; ++a) states.push_back(input(a));
        kwargs["initial_state"] = states;
      }
      if (n.attention_mask) kwargs["attention_mask"] = input(n.inputs.size() - 1);
      if (n.call_mask) kwargs["mask"] = input(n.inputs.size() - 1);
      if (n.training) {
        kwargs["training"] = *n.training;
        if (n.training == keras_default_training(*m.layers()[i]))
          std::fprintf(stderr,
                       "WARNING: model '%s': layer '%s' is called with training=%s, which a Keras file cannot keep: "
                       "Keras writes that value on every call of a %s, so the file's call follows the model's mode\n",
                       m.name().c_str(), m.layers()[i]->name().c_str(), *n.training ? "True" : "False",
                       m.layers()[i]->class_name().c_str());
      }
      inbound.push_back({{"args", one_list ? json::array({args}) : args}, {"kwargs", kwargs}});
    }
    entry["inbound_nodes"] = inbound;
    list.push_back(entry);
  }
  // As Keras writes them: one input or output as the reference itself, several as a list or a
  // dict of references.
  const auto endpoints = [&](const Structure& st, const auto& node_of, const auto& index_of) {
    if (st.single()) return history(m, node_of(0), index_of(0));
    json out = st.form == Structure::Form::kDict ? json::object() : json::array();
    for (std::size_t k = 0; k < st.size(); ++k) {
      if (st.form == Structure::Form::kDict) out[st.names[k]] = history(m, node_of(k), index_of(k));
      else out.push_back(history(m, node_of(k), index_of(k)));
    }
    return out;
  };
  return {{"name", m.name()},
          {"trainable", m.trainable()},
          {"layers", list},
          {"input_layers", endpoints(m.input_structure(), [](std::size_t k) { return k; }, [](std::size_t) { return 0; })},
          {"output_layers", endpoints(m.output_structure(), [&](std::size_t k) { return m.output_nodes()[k]; },
                                      [&](std::size_t k) { return m.output_indices()[k]; })}};
}

std::unique_ptr<Functional> functional_from_config(const json& config, const LayerFromJson& make_layer,
                                                   std::optional<std::uint64_t> seed, const std::string& source) {
  if (!config.is_object() || !config.value("layers", json()).is_array() || config.at("layers").empty())
    fail(source, "the Functional config has no list of layers");
  const std::string name = config.value("name", json()).is_string() ? config.at("name").get<std::string>() : "functional";

  // Each layer with the calls still to make; the tensors made so far by (layer, node index).
  struct Pending {
    std::string name;
    Callee callee;
    json nodes;
    std::size_t done = 0;
  };
  check_size(config.at("layers"), source);
  std::vector<Pending> pending;
  std::map<Reference, KerasTensor> tensors;
  std::set<std::string> names;
  std::set<std::string> mask_nodes;  // Keras' records of masks (mask_op)
  const MaskMakers makers = mask_makers(config.at("layers"), source);
  for (const auto& entry : config.at("layers")) {
    if (!entry.is_object() || !entry.value("name", json()).is_string())
      fail(source, "a layer of the Functional config has no name: " + entry.dump().substr(0, 200));
    const std::string lname = entry.at("name").get<std::string>();
    if (!names.insert(lname).second) fail(source, "two layers are named '" + lname + "'");
    if (entry.value("class_name", json()) == json("InputLayer")) {
      const json& c = entry.value("config", json());
      const json& s = c.is_object() ? c.value("batch_shape", c.value("shape", json())) : json();
      try {
        Shape shape = shape_from_json(s);
        if (c.contains("batch_shape")) shape = shape.tail();
        tensors[{lname, 0, 0}] = Input(shape, lname);
      } catch (const std::exception& e) {
        fail(source, "InputLayer '" + lname + "': its shape " + s.dump().substr(0, 200) + " is not a shape (" + e.what() + ")");
      }
      continue;
    }
    const json& nodes = entry.value("inbound_nodes", json());
    if (!nodes.is_array()) fail(source, "layer '" + lname + "' has no list of inbound_nodes");
    if (mask_op(entry, lname, nodes, mask_nodes, makers, source)) {
      mask_nodes.insert(lname);
      continue;
    }
    pending.push_back({lname, make_layer(entry), nodes});
  }

  // Layers are listed by depth, but a shared layer's later call may wait for layers after it.
  // A layer whose next call lacks an input waits for that tensor alone (a pass over every layer
  // until nothing moved was quadratic for layers listed in reverse).
  const auto reference_of = [&](const Pending& p, const json& arg) { return tensor_reference(arg, p.name, source); };
  std::map<Reference, std::vector<std::size_t>> waiting;
  std::vector<std::size_t> ready(pending.size());
  for (std::size_t i = 0; i < ready.size(); ++i) ready[i] = pending.size() - 1 - i;  // in file order
  while (!ready.empty()) {
    auto& p = pending[ready.back()];
    const std::size_t which = ready.back();
    ready.pop_back();
    while (p.done < p.nodes.size()) {
      const json& node = p.nodes[p.done];
      const json& args = node.is_object() ? node.value("args", json()) : node;
      const json kwargs = node.is_object() ? node.value("kwargs", json::object()) : json::object();
      bool causal = false, scores = false;
      std::optional<std::vector<Reference>> state_refs;  // initial_state
      std::optional<bool> training;
      std::optional<Reference> mask_ref, call_mask_ref;
      if (kwargs.is_object())
        for (const auto& [key, value] : kwargs.items()) {
          if (key == "use_causal_mask" && value.is_boolean()) causal = value.get<bool>();
          else if (key == "return_attention_scores" && value.is_boolean()) scores = value.get<bool>();
          // Keras writes a list of tensors (one tensor where the call was given one).
          else if (key == "initial_state" && (value.is_array() || value.is_object())) {
            state_refs.emplace();
            for (const auto& t : value.is_array() ? value : json::array({value})) state_refs->push_back(reference_of(p, t));
          }
          else if (key == "attention_mask" && value.is_object()) mask_ref = reference_of(p, value);
          // A record of a mask is the mask lockstep carries to this call itself; another tensor is
          // the call's own mask (Softmax()(x, mask=m)).
          else if (key == "mask" && value.is_object() && mask_nodes.count(std::get<0>(reference_of(p, value)))) continue;
          else if (key == "mask" && value.is_object()) call_mask_ref = reference_of(p, value);
          else if (key == "training" && value.is_boolean()) training = value.get<bool>();
          else if (key == "training" && !value.is_null())
            fail(source, "layer '" + p.name + "': call " + std::to_string(p.done) + " has the argument training=" +
                             value.dump().substr(0, 100) + ", which must be true, false or null");
          else if (!value.is_null())
            fail(source, "layer '" + p.name + "': call " + std::to_string(p.done) + " has the argument " + key + "=" +
                             value.dump().substr(0, 100) + ", which lockstep's layers do not take");
        }
      if (!args.is_array() || args.empty())
        fail(source, "layer '" + p.name + "': inbound node " + std::to_string(p.done) + " has no arguments");
      const bool list = args.size() == 1 && args[0].is_array();
      std::vector<KerasTensor> xs;
      std::optional<Reference> missing;
      for (const auto& arg : list ? args[0] : args) {
        const auto ref = reference_of(p, arg);
        const auto it = tensors.find(ref);
        if (it == tensors.end()) {
          missing = ref;
          break;
        }
        xs.push_back(it->second);
      }
      KerasTensor mask, call_mask;
      for (auto [ref, tensor] : {std::pair{&mask_ref, &mask}, std::pair{&call_mask_ref, &call_mask}}) {
        if (!*ref || missing) continue;
        const auto it = tensors.find(**ref);
        if (it == tensors.end()) missing = *ref;
        else *tensor = it->second;
      }
      std::vector<KerasTensor> states;
      for (std::size_t k = 0; state_refs && k < state_refs->size() && !missing; ++k) {
        const auto it = tensors.find((*state_refs)[k]);
        if (it == tensors.end()) missing = (*state_refs)[k];
        else states.push_back(it->second);
      }
      if (missing) {  // an input is not made yet
        waiting[*missing].push_back(which);
        break;
      }
      const int node_index = static_cast<int>(p.done);
      std::vector<KerasTensor> made;
      try {
        // Keras writes Dropout's training=False on each of its calls, whatever the call was given
        // (and Keras 3's fit passes training=True over it): that value is no training= of the call.
        if (p.callee.layer && training == keras_default_training(*p.callee.layer)) training.reset();
        // A list, or several positional tensors (MultiHeadAttention's query, value): a list call.
        const CallKwargs kw{.training = training, .use_causal_mask = causal,
                            .attention_mask = mask_ref ? &mask : nullptr, .mask = call_mask_ref ? &call_mask : nullptr,
                            .return_attention_scores = scores, .initial_state = state_refs ? &states : nullptr};
        if (p.callee.model) made = call(*p.callee.model, xs, kw);
        else made = call_outputs(p.callee.layer, xs, kw);
      } catch (const Error& e) {
        fail(source, e.what());
      }
      ++p.done;
      for (std::size_t k = 0; k < made.size(); ++k) {
        const Reference ref{p.name, node_index, static_cast<int>(k)};
        tensors[ref] = made[k];
        if (const auto w = waiting.find(ref); w != waiting.end()) {
          ready.insert(ready.end(), w->second.rbegin(), w->second.rend());
          waiting.erase(w);
        }
      }
    }
  }
  for (const auto& p : pending)
    if (p.done < p.nodes.size())
      fail(source, "layer '" + p.name + "': call " + std::to_string(p.done) +
                       " takes a tensor that no layer of the model makes (a missing layer, node index or tensor index, "
                       "or a cycle)");

  const auto tensor_at = [&](const char* key, const json& ref) {
    const auto it = tensors.find(reference(ref, source));
    if (it == tensors.end()) fail(source, std::string(key) + " names " + ref.dump() + ", which no layer makes");
    return it->second;
  };
  // [name, node, 0] (Keras' form for one tensor), a list of them, or a dict of them.
  const auto endpoints = [&](const char* key) -> KerasTensors {
    const json& j = config.value(key, json());
    if (j.is_object() && !j.empty()) {
      std::map<std::string, KerasTensor> dict;
      for (const auto& [k, ref] : j.items()) dict.emplace(k, tensor_at(key, ref));
      return dict;
    }
    if (j.is_array() && !j.empty() && j[0].is_array()) {
      if (j.size() == 1) return tensor_at(key, j[0]);
      std::vector<KerasTensor> list;
      for (const auto& ref : j) list.push_back(tensor_at(key, ref));
      return list;
    }
    if (!j.is_array() || j.empty())
      fail(source, std::string(key) + " must name a tensor, a list or a dict of them, got " + j.dump().substr(0, 200));
    return tensor_at(key, j);
  };
  const KerasTensors in = endpoints("input_layers"), out = endpoints("output_layers");
  try {
    return std::make_unique<Functional>(in, out, name, seed);
  } catch (const Error& e) {
    fail(source, e.what());
  }
}

}  // namespace lockstep::detail
