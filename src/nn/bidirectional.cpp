// Bidirectional: Keras 3's wrapper (keras/src/layers/rnn/bidirectional.py) over RecurrentLayer::run.
#include "lockstep/layers/bidirectional.hpp"

#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
using nlohmann::json;

// Keras' default name of a layer of the class (snake case), for an unnamed layer.
std::string default_name(const std::string& cls) {
  if (cls == "SimpleRNN") return "simple_rnn";
  std::string s = cls;
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string without_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

std::shared_ptr<RecurrentLayer> as_recurrent(const LayerPtr& layer, const char* argument) {
  LOCKSTEP_CHECK(layer != nullptr, "Bidirectional: ", argument, " is null");
  auto r = std::dynamic_pointer_cast<RecurrentLayer>(layer);
  LOCKSTEP_CHECK(r != nullptr, "Bidirectional: ", argument,
                 " must be a recurrent layer (SimpleRNN, LSTM or GRU), got '", layer->name(), "' (",
                 layer->class_name(), ")");
  return r;
}

// A new layer of `layer`'s class from its config with the given changes (Keras builds both
// layers from the serialized config, so they share no state with the given layer), its dtype
// policy kept.
std::shared_ptr<RecurrentLayer> remade(const RecurrentLayer& layer, const json& changes) {
  json config = layer.get_config();
  config.update(changes);
  auto out =
      std::dynamic_pointer_cast<RecurrentLayer>(find_layer_class(layer.class_name())->from_config(config));
  out->set_dtype_policy(layer.dtype_policy());
  return out;
}

// The layer a nested {"class_name", "config"} describes (Bidirectional's argument `key`), through
// the registry.
LayerPtr nested_layer(const json& j, const char* key) {
  LOCKSTEP_CHECK(j.is_object(), "Bidirectional: argument ", key, "=", j.dump().substr(0, 120),
                 " must be a layer ({\"class_name\": ..., \"config\": {...}})");
  auto r = layer_config_reader(std::string("Bidirectional's ") + key, j);
  const std::string cls = r.string("class_name");
  const auto c = find_layer_class(cls);
  LOCKSTEP_CHECK(c.has_value(), "Bidirectional: its layer's class '", cls,
                 "' is not a layer class lockstep has");
  // The wrapper is frozen or not as a whole (its trainable), as it holds the weights.
  json config = r.value("config");
  if (config.is_object()) config.erase("trainable");  // else the class's reader refuses it
  return c->from_config(config);
}
}  // namespace

BidirectionalLayer::BidirectionalLayer(const LayerPtr& layer, const std::optional<std::string>& merge_mode,
                                       const LayerPtr& backward_layer, const std::string& name)
    : Layer(name), merge_mode_(merge_mode) {
  LOCKSTEP_CHECK(!merge_mode_ || *merge_mode_ == "concat" || *merge_mode_ == "sum" || *merge_mode_ == "mul" ||
                     *merge_mode_ == "ave",
                 "Bidirectional: invalid merge_mode '", merge_mode_.value_or(""),
                 "': expected one of \"concat\", \"sum\", \"mul\", \"ave\" or None");
  const auto given = as_recurrent(layer, "layer");
  for (const auto& l : {given, backward_layer ? as_recurrent(backward_layer, "backward_layer") : given})
    LOCKSTEP_CHECK(!l->options().return_state, "Bidirectional: a layer with return_state=True (Keras' output "
                   "followed by both layers' states) is not supported by lockstep's Bidirectional");
  const std::string base = given->name().empty() ? default_name(given->class_name()) : given->name();
  // Keras forces zero_output_for_mask = return_sequences in both layers.
  const bool sequences = given->options().return_sequences;
  forward_ = remade(
      *given, {{"name", "forward_" + without_prefix(base, "forward_")}, {"zero_output_for_mask", sequences}});
  if (backward_layer == nullptr) {
    backward_ = remade(*given, {{"name", "backward_" + without_prefix(base, "backward_")},
                                {"go_backwards", true},
                                {"zero_output_for_mask", sequences}});
  } else {
    const auto b = as_recurrent(backward_layer, "backward_layer");
    LOCKSTEP_CHECK(b->options().return_sequences == sequences,
                   "Bidirectional: the forward and backward layers must have "
                   "the same return_sequences, got ",
                   sequences ? "True" : "False", " for the forward layer and ", sequences ? "False" : "True",
                   " for the backward layer");
    LOCKSTEP_CHECK(b->options().units == forward_->options().units,
                   "Bidirectional: the backward layer must have the "
                   "forward layer's units (",
                   forward_->options().units,
                   ", from which Keras computes the output "
                   "shape), got ",
                   b->options().units);
    // An unnamed given layer is named as Keras' default would be, its class's, after "backward_".
    const std::string named = b->name().empty() ? "backward_" + default_name(b->class_name()) : b->name();
    backward_ = remade(*b, {{"name", named}, {"zero_output_for_mask", sequences}});
  }
  // Keras' _verify_layer_config (a layer that goes backwards itself has no forward copy).
  LOCKSTEP_CHECK(
      backward_->options().go_backwards != forward_->options().go_backwards,
      "Bidirectional: the forward and backward layers must have different go_backwards values, got ",
      forward_->options().go_backwards ? "True" : "False", " for both");
}

Shape BidirectionalLayer::compute_output_shape(const Shape& s) const {
  Shape out = forward_->compute_output_shape(s);
  if (merge_mode_ != "concat") return out;  // merge_mode=None: each output's
  std::vector<std::int64_t> dims = out.dims();
  dims.back() *= 2;
  return Shape(std::move(dims));
}

void BidirectionalLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  forward_->set_dtype_policy(dtype_policy());
  backward_->set_dtype_policy(dtype_policy());
  forward_->build(s, mix_seed(seed, 1));
  backward_->build(s, mix_seed(seed, 2));
  // The wrapper holds the layers' weights (Keras' order: the forward layer's, then the
  // backward's), the very variables the layers compute with.
  adopt_weights(*forward_);
  adopt_weights(*backward_);
}

std::vector<Tensor> BidirectionalLayer::unmerged(const Tensor& x, const Tensor& mask, const CallContext& ctx) const {
  Tensor y = forward_->run(x, mask, {}, ctx).output;
  Tensor y_rev = backward_->run(x, mask, {}, ctx).output;
  if (forward_->options().return_sequences) {
    // Keras' ops.flip(y_rev, axis=1): row b * steps + t of [batch * steps, units] reads row
    // b * steps + (steps - 1 - t), one recorded gather.
    const std::int64_t batch = y_rev.dim(0), steps = y_rev.dim(1), units = y_rev.dim(2);
    const Tensor index =
        device_constant({"Bidirectional reversed steps", {steps}}, batch * steps, [steps](std::int64_t m) {
          std::vector<std::int64_t> r(static_cast<std::size_t>(m));
          for (std::int64_t i = 0; i < m; ++i)
            r[static_cast<std::size_t>(i)] = (i / steps) * steps + steps - 1 - i % steps;
          return Tensor::from_vector(r, Shape{m});
        });
    y_rev = reshape(gather_rows(reshape(y_rev, {batch * steps, units}), index), {batch, steps, units});
  }
  return {std::move(y), std::move(y_rev)};
}

Tensor BidirectionalLayer::merge(const Tensor& x, const Tensor& mask, const CallContext& ctx) const {
  LOCKSTEP_CHECK(merge_mode_.has_value(), "Bidirectional '", name(),
                 "' has merge_mode=None and gives two tensors, [forward output, backward output]: call it "
                 "in a Functional model with lockstep::call_outputs");
  const std::vector<Tensor> ys = unmerged(x, mask, ctx);
  const Tensor &y = ys[0], &y_rev = ys[1];
  if (merge_mode_ == "concat") return concatenate({y, y_rev}, -1);
  if (merge_mode_ == "sum") return add(y, y_rev);
  if (merge_mode_ == "mul") return mul(y, y_rev);
  return scale(add(y, y_rev), 0.5f);
}

Tensor BidirectionalLayer::call(const Tensor& x, const CallContext& ctx) const {
  return merge(x, Tensor(), ctx);
}

Tensor BidirectionalLayer::call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const {
  return merge(x, mask, ctx);
}

Tensor BidirectionalLayer::compute_mask(const Tensor& x, const Tensor& mask) const {
  return forward_->compute_mask(x, mask);  // Keras' RNN rule, the recurrent layers' (both agree on return_sequences)
}

std::string BidirectionalLayer::describe_outputs(const CallOptions& options) const {
  return merge_mode_ ? Layer::describe_outputs(options) : "its forward and backward outputs (merge_mode=None)";
}

std::vector<Shape> BidirectionalLayer::more_output_shapes(const std::vector<Shape>& inputs, const CallOptions&) const {
  if (merge_mode_) return {};
  return {compute_output_shape(inputs.front())};
}

std::vector<Tensor> BidirectionalLayer::call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                                     const CallContext& ctx) const {
  if (merge_mode_) return Layer::call_outputs(inputs, args, ctx);
  return unmerged(inputs.front(), args.masks.empty() ? Tensor() : args.masks.front(), ctx);
}

std::vector<Layer::KerasSublayer> BidirectionalLayer::keras_sublayers() const {
  return {{"layer", "forward_layer", forward_.get()}, {"backward_layer", "backward_layer", backward_.get()}};
}

std::string BidirectionalLayer::keras_weight_path(std::size_t index) const {
  const std::size_t n = forward_->variables().size();
  return index < n ? "forward_layer/" + forward_->keras_weight_path(index)
                   : "backward_layer/" + backward_->keras_weight_path(index - n);
}

json BidirectionalLayer::get_config() const {
  json c = Layer::get_config();
  const auto nested = [](const RecurrentLayer& l) {
    return json{{"class_name", l.class_name()}, {"config", l.get_config()}};
  };
  c["layer"] = nested(*forward_);
  c["merge_mode"] = merge_mode_ ? json(*merge_mode_) : json(nullptr);
  c["backward_layer"] = nested(*backward_);
  return c;
}

LayerPtr BidirectionalLayer::from_config(const json& c) {
  auto r = layer_config_reader("Bidirectional", c);
  // merge_mode=None: the two directions' outputs as a list.
  const std::optional<std::string> merge_mode =
      !c.contains("merge_mode") ? std::optional<std::string>("concat")
      : r.raw("merge_mode")     ? std::optional(r.string("merge_mode"))
                                : std::nullopt;
  const LayerPtr backward = r.raw("backward_layer") ? nested_layer(r.value("backward_layer"), "backward_layer") : nullptr;
  return std::make_shared<BidirectionalLayer>(nested_layer(r.value("layer"), "layer"), merge_mode, backward, r.string("name"));
}

LayerPtr Bidirectional(const LayerPtr& layer, const std::optional<std::string>& merge_mode,
                       const LayerPtr& backward_layer) {
  return std::make_shared<BidirectionalLayer>(layer, merge_mode, backward_layer);
}

}  // namespace lockstep::layers
