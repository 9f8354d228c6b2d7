#include "model_zoo.hpp"

#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/applications.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep::cli {

namespace {
// The models each model-specific flag applies to; "FILE.keras" stands for a Keras file's model.
struct ModelFlag {
  const char* flag;
  std::vector<std::string> models;
};
const ModelFlag kModelFlags[] = {
    {"--hidden", {"mlp"}},
    {"--activation", {"mlp"}},
    {"--dropout", {"mlp", "cnn", "vit"}},
    {"--patch", {"vit"}},
    {"--mlp", {"vit"}},
    {"--dim", {"vit", "gpt"}},
    {"--heads", {"vit", "gpt"}},
    {"--depth", {"vit", "gpt"}},
    {"--text", {"gpt"}},
    {"--sequence-length", {"gpt"}},
    {"--dataset", {"mlp", "cnn", "resnet20", "vit", "FILE.keras"}},
    {"--num-classes", {"mlp", "cnn", "resnet20", "vit", "FILE.keras"}},
};

// The flags that set a transformer's sizes, and the options of the model they set (0: the
// option's own default).
template <class Options>
struct SizeFlag {
  const char* flag;
  std::int64_t TrainArgs::*arg;
  const char* option_name;
  std::int64_t Options::*option;
};
using applications::CharGPTOptions;
using applications::ViTOptions;
const SizeFlag<ViTOptions> kViTSizes[] = {{"--patch", &TrainArgs::patch, "patch_size", &ViTOptions::patch_size},
                                          {"--dim", &TrainArgs::dim, "dim", &ViTOptions::dim},
                                          {"--heads", &TrainArgs::heads, "num_heads", &ViTOptions::num_heads},
                                          {"--depth", &TrainArgs::depth, "depth", &ViTOptions::depth},
                                          {"--mlp", &TrainArgs::mlp, "mlp_dim", &ViTOptions::mlp_dim}};
const SizeFlag<CharGPTOptions> kGPTSizes[] = {{"--dim", &TrainArgs::dim, "dim", &CharGPTOptions::dim},
                                              {"--heads", &TrainArgs::heads, "num_heads", &CharGPTOptions::num_heads},
                                              {"--depth", &TrainArgs::depth, "depth", &CharGPTOptions::depth}};

// `o` with the sizes the flags give, checked (applications::validate); an error says which flag
// sets which option.
template <class Options, std::size_t N>
Options sized(Options o, const TrainArgs& a, const SizeFlag<Options> (&flags)[N]) {
  for (const auto& f : flags)
    if (a.*f.arg > 0) o.*f.option = a.*f.arg;
  try {
    applications::validate(o);
  } catch (const ValueError& e) {
    std::string names;
    for (const auto& f : flags) names += std::string(names.empty() ? "" : ", ") + f.flag + " sets " + f.option_name;
    throw ValueError("--model " + a.model + ": " + e.what() + " (" + names + ")");
  }
  return o;
}

ViTOptions vit_options(const TrainArgs& a, const Shape& image, std::int64_t outputs, const std::string& head,
                       double dropout) {
  return sized(ViTOptions{.input_shape = image,
                          .classes = outputs,
                          .dropout = static_cast<float>(dropout),
                          .classifier_activation = head},
               a, kViTSizes);
}

CharGPTOptions gpt_options(const TrainArgs& a, const Shape& sequence, std::int64_t vocabulary) {
  return sized(CharGPTOptions{.vocabulary_size = vocabulary, .sequence_length = sequence[0]}, a, kGPTSizes);
}

std::string one_of(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}
}  // namespace

std::string size_defaults(const char* flag) {
  std::string out;
  const auto add = [&](const char* model, const auto& flags, const auto& defaults) {
    for (const auto& f : flags)
      if (std::string(f.flag) == flag) out += std::string(out.empty() ? "" : ", ") + model + " " + std::to_string(defaults.*f.option);
  };
  add("vit", kViTSizes, ViTOptions{});
  add("gpt", kGPTSizes, CharGPTOptions{});
  return out;
}

double default_dropout(const std::string& model) {
  if (model == "vit") return ViTOptions{}.dropout;
  return model == "cnn" ? 0.5 : 0.2;
}

void check_model_flags(const TrainArgs& a) {
  bool zoo = false;
  for (const char* name : kModelNames) zoo = zoo || a.model == name;
  const std::string model = zoo ? a.model : "FILE.keras";
  for (const auto& f : kModelFlags) {
    if (!a.given.contains(f.flag)) continue;
    bool applies = false;
    for (const auto& m : f.models) applies = applies || m == model;
    LOCKSTEP_CHECK(applies, f.flag, " applies to --model ", one_of(f.models), ", not --model ", a.model);
  }
}

void check_model_sizes(const TrainArgs& a, const Shape& image, std::int64_t outputs) {
  if (a.model == "vit") (void)vit_options(a, image, outputs, "softmax", default_dropout("vit"));
  if (a.model == "gpt") (void)gpt_options(a, image, outputs);
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
  if (a.model == "gpt") return applications::CharGPT(gpt_options(a, image, outputs));
  if (a.model == "resnet20") return applications::ResNet20({.input_shape = image, .classes = outputs, .classifier_activation = head});
  if (a.model == "vit") return applications::ViT(vit_options(a, image, outputs, head, dropout));
  throw ValueError("--model: unknown model '" + a.model + "' (expected mlp, cnn, resnet20, vit or gpt)");
}

}  // namespace lockstep::cli
