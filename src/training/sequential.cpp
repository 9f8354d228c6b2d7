#include "lockstep/training/sequential.hpp"

#include <cctype>
#include <cstdio>
#include <map>

#include "lockstep/layers/initializers.hpp"
#include "training/layer_config.hpp"

namespace lockstep {

namespace {
std::string with_commas(std::int64_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') s += ',';
    s += digits[i];
  }
  return s;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}
}  // namespace

Sequential::Sequential(std::vector<layers::LayerPtr> layer_list, std::string name) : Model(std::move(name)) {
  for (auto& l : layer_list) add(std::move(l));
}

void Sequential::add(layers::LayerPtr layer) {
  LOCKSTEP_CHECK(layer != nullptr, "Sequential::add: null layer");
  if (layer->name().empty()) {
    const std::string base = detail::snake_case(layer->class_name());
    int count = 0;
    for (const auto& l : layers_)
      if (l->class_name() == layer->class_name()) ++count;
    layer->set_name(count ? base + "_" + std::to_string(count) : base);
  }
  layers_.push_back(std::move(layer));
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
  layer->build(in, layers::mix_seed(seed_, i + 1));
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
  Tensor h = x;
  const std::size_t last = layers_.size() - 1;
  for (std::size_t i = 0; i < last; ++i) h = layers_[i]->call(h, ctx);
  // The final softmax and the loss are computed in float32 whatever the layers' policy
  // (Keras' advice for mixed precision, applied for the user): a 16-bit softmax loses the
  // small probabilities that the loss and its gradient are made of.
  const auto f32 = [](const Tensor& t) { return is_floating(t.dtype()) && t.dtype() != DType::kF32 ? cast(t, DType::kF32) : t; };
  Output out;
  if (layers_[last]->has_softmax_output()) {
    out.logits = f32(layers_[last]->call_logits(h, ctx));
    out.output = softmax(out.logits);
  } else {
    out.output = f32(layers_[last]->call(h, ctx));
  }
  return out;
}

std::vector<Variable> Sequential::variables() const {
  std::vector<Variable> out;
  for (const auto& l : layers_)
    for (const auto& v : l->variables()) out.push_back(v);
  return out;
}

std::string Sequential::summary() const {
  LOCKSTEP_CHECK(built_, "Sequential::summary: the model is not built yet; give the first layer an input_dim or "
                         "call build(input_shape)");
  const std::string rule(65, '_'), thick(65, '=');
  std::string s = "Model: \"" + name() + "\"\n" + rule + "\n";
  s += pad(" Layer (type)", 29) + pad("Output Shape", 26) + "Param #\n" + thick + "\n";
  std::int64_t total = 0, trainable = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    s += pad(" " + l->name() + " (" + l->class_name() + ")", 29) + pad(output_shapes_[i].str(), 26) +
         std::to_string(l->count_params()) + "\n";
    total += l->count_params();
    for (const auto& v : l->trainable_variables()) trainable += v.shape().numel();
  }
  s += thick + "\n";
  s += "Total params: " + with_commas(total) + "\n";
  s += "Trainable params: " + with_commas(trainable) + "\n";
  s += "Non-trainable params: " + with_commas(total - trainable) + "\n" + rule + "\n";
  return s;
}

}  // namespace lockstep
