#include "model_zoo.hpp"

#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/applications.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep::cli {

double default_dropout(const std::string& model) {
  if (model == "vit") return applications::ViTOptions{}.dropout;
  return model == "cnn" ? 0.5 : 0.2;
}

Shape model_input_shape(const std::string& model, const Shape& image) {
  if (model == "mlp") return Shape{image.numel()};
  return image;
}

std::unique_ptr<Model> build_model(const TrainArgs& a, const Shape& image, std::int64_t outputs,
                                   const std::string& head, double dropout) {
  const auto rate = static_cast<float>(dropout);
  if (a.model == "mlp") {
    return std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Dense(a.hidden, a.activation, image.numel()), layers::Dropout(rate), layers::Dense(outputs, head)});
  }
  if (a.model == "cnn") {
    return std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Input(image), layers::Conv2D(32, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
                                      layers::Conv2D(64, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}), layers::Flatten(),
                                      layers::Dropout(rate), layers::Dense(outputs, head)},
        "simple_convnet");
  }
  if (a.model == "gpt") {
    applications::CharGPTOptions o{.vocabulary_size = outputs, .sequence_length = image[0]};
    for (auto [flag, field] : {std::pair{a.dim, &o.dim}, {a.heads, &o.num_heads}, {a.depth, &o.depth}})
      if (flag > 0) *field = flag;
    return applications::CharGPT(o);
  }
  if (a.model == "resnet20") return applications::ResNet20({.input_shape = image, .classes = outputs, .classifier_activation = head});
  if (a.model == "vit") {
    applications::ViTOptions o{.input_shape = image, .classes = outputs, .dropout = rate, .classifier_activation = head};
    for (auto [flag, field] : {std::pair{a.patch, &o.patch_size}, {a.dim, &o.dim}, {a.heads, &o.num_heads},
                               {a.depth, &o.depth}, {a.mlp, &o.mlp_dim}})
      if (flag > 0) *field = flag;
    return applications::ViT(o);
  }
  throw ValueError("--model: unknown model '" + a.model + "' (expected mlp, cnn, resnet20, vit or gpt)");
}

}  // namespace lockstep::cli
