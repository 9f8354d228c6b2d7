#include "lockstep/training/sequential.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "training/layer_config.hpp"
#include "training/summary_table.hpp"

namespace lockstep {

Sequential::Sequential(std::vector<layers::LayerPtr> layer_list, std::string name) : Model(std::move(name)) {
  for (auto& l : layer_list) add(std::move(l));
}

bool Sequential::holds_name(const std::string& name) const {
  return std::any_of(layers_.begin(), layers_.end(), [&](const auto& l) { return l->name() == name; });
}

void Sequential::add(layers::LayerPtr layer) {
  LOCKSTEP_CHECK(layer != nullptr, "Sequential::add: null layer");
  // A layer whose calls give several tensors (Layer::output_count): Keras refuses it too (at the
  // next layer, which gets several tensors).
  if (const std::size_t count = layer->output_count({}); count > 1) {
    // Not named yet: its place among the model's layers (Keras' model.layers: the input is none).
    const auto place = std::count_if(layers_.begin(), layers_.end(),
                                     [](const auto& l) { return l->class_name() != "InputLayer"; }) + 1;
    const std::string which = layer->name().empty() ? "its layer " + std::to_string(place)
                                                    : "layer '" + layer->name() + "'";
    throw ValueError("Sequential '" + name() + "': " + which + " (" + layer->class_name() + ") gives " +
                     std::to_string(count) + " tensors, " + layer->describe_outputs({}) +
                     "; a Sequential model's layers give one tensor each: build a Functional model "
                     "(keras.Model(inputs, outputs); in C++ lockstep::call_outputs)");
  }
  bool named = false;
  if (layer->name().empty()) {
    // Numbered within the class (dense, dense_1, ...), past any name a layer holds already.
    const std::string base = detail::snake_case(layer->class_name());
    int count = 0;
    for (const auto& l : layers_)
      if (l->class_name() == layer->class_name()) ++count;
    for (;; ++count)
      if (const std::string name = count ? base + "_" + std::to_string(count) : base; !holds_name(name)) {
        layer->set_name(name);
        named = true;
        break;
      }
  }
  // Keras' rule and message: a name twice makes a saved model's layers and a checkpoint's
  // variables ambiguous; the same layer given twice holds its name twice.
  if (holds_name(layer->name()))
    throw ValueError("All layers added to a Sequential model should have unique names. Name '" + layer->name() +
                     "' is already the name of a layer in this model. Update the `name` argument to pass a unique "
                     "name.");
  if (named) named_.insert(layer.get());
  add_layer(std::move(layer));
  // Build as soon as the input is known (Keras does the same), so that a layer that cannot
  // take its predecessor's output is reported when the model is made, naming both shapes.
  if (layers_.size() == 1 && layers_[0]->declared_input_shape()) {
    std::vector<std::int64_t> dims{-1};
    for (auto d : layers_[0]->declared_input_shape()->dims()) dims.push_back(d);
    input_shape_ = Shape(std::move(dims));
  }
  if (input_shape_.rank() > 0) build_layer(layers_.size() - 1);
}

void Sequential::build_layer(std::size_t i) {
  const Shape in = i == 0 ? input_shape_ : output_shapes_[i - 1];
  const auto& layer = layers_[i];
  if (layer->declared_input_shape() && i > 0) {
    LOCKSTEP_CHECK(in.tail() == *layer->declared_input_shape(), "layer '", layer->name(), "' (", layer->class_name(),
                   ") declares input shape ", layers::with_batch_dim(*layer->declared_input_shape()).str(), " but the previous layer '", layers_[i - 1]->name(),
                   "' outputs ", in.str());
  }
  layer->build(in, layer_seed(i));
  output_shapes_.push_back(layer->compute_output_shape(in));
  built_ = true;
}

void Sequential::build(const Shape& input_shape) {
  if (built_) return;
  LOCKSTEP_CHECK(!layers_.empty(), "Sequential '", name(), "' has no layers");
  LOCKSTEP_CHECK(input_shape.rank() >= 1, "Sequential::build: input shape ", input_shape.str(),
                 " needs a batch dimension");
  std::vector<std::int64_t> dims = input_shape.dims();
  dims[0] = -1;
  input_shape_ = Shape(std::move(dims));
  output_shapes_.clear();
  for (std::size_t i = 0; i < layers_.size(); ++i) build_layer(i);
}

Model::Output Sequential::forward(const Tensor& x, const layers::CallContext& ctx) const {
  LOCKSTEP_CHECK(built_, "Sequential '", name(), "' is called before it was built");
  LOCKSTEP_CHECK(x.rank() == input_shape_.rank() && x.shape().tail() == input_shape_.tail(), "Sequential '", name(),
                 "' expects input shape ", input_shape_.str(), " but received ", x.shape().str());
  Tensor h = x, mask;  // mask: Keras' mask of h (Layer::compute_mask), undefined for none
  const std::size_t last = layers_.size() - 1;
  for (std::size_t i = 0;; ++i) {
    // A pair with a fused op (Conv2D then MaxPooling2D) runs as one, unless the second is the output layer.
    if (i + 1 < last && !mask.defined()) {
      if (Tensor fused = layers_[i]->call_then(*layers_[i + 1], h, ctx); fused.defined()) {
        h = std::move(fused);
        ++i;
        continue;
      }
    }
    const layers::Layer& layer = *layers_[i];
    Tensor next_mask = layer.compute_mask(h, mask);  // every layer's, the output layer's too (Layer::compute_mask)
    if (i == last) {
      Output out = output_in_float32(layer, [&](bool logits) {
        if (logits) return layer.call_logits(h, ctx);
        return layer.call_with_output_mask(h, mask, next_mask, ctx);
      }, ctx.softmax_to_loss, mask.defined());
      out.mask = std::move(next_mask);
      return out;
    }
    h = layer.call_with_output_mask(h, mask, next_mask, ctx);
    mask = std::move(next_mask);
  }
}

Shape Sequential::input_shape() const {
  LOCKSTEP_CHECK(built_, "Sequential '", name(), "' is not built yet, so it has no input shape");
  return input_shape_;
}

Shape Sequential::output_shape() const {
  LOCKSTEP_CHECK(built_, "Sequential '", name(), "' is not built yet, so it has no output shape");
  return output_shapes_.back();
}

std::string Sequential::summary() const {
  LOCKSTEP_CHECK(built_, "Sequential::summary: the model is not built yet; give the first layer an input_dim or "
                         "call build(input_shape)");
  std::vector<detail::SummaryRow> rows;
  for (std::size_t i = 0; i < layers_.size(); ++i) rows.push_back({layers_[i].get(), output_shapes_[i], {}, {}});
  return detail::summary_table(*this, rows, /*connected=*/false);
}

}  // namespace lockstep
