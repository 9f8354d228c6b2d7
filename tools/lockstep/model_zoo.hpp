#pragma once
// The models `lockstep train --model NAME` builds.
#include <memory>
#include <string>

#include "commands.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::cli {

/// The names --model accepts.
inline const char* const kModelNames[] = {"mlp", "cnn", "resnet20", "vit", "gpt"};

/// The Dropout rate of --model's network when --dropout is not given (mlp 0.2, cnn 0.5 as in
/// Keras' example, vit ViTOptions').
double default_dropout(const std::string& model);

/// "vit 64, gpt 128": the defaults of the sizes a flag (--patch, --dim, ...) sets, which are
/// applications::ViTOptions' and CharGPTOptions' (for --help).
std::string size_defaults(const char* flag);

/// A model-specific flag given (TrainArgs::given) for a model it does not apply to (--model mlp
/// --patch 4) is a ValueError naming the flag and the models it applies to.
void check_model_flags(const TrainArgs& args);

/// --model vit or gpt: the sizes the flags give, with the model's own defaults for the others,
/// checked against the examples' shape as the model would check them (applications::validate),
/// before anything is built or a run directory claimed; a ValueError says which flag sets which option.
void check_model_sizes(const TrainArgs& args, const Shape& image, std::int64_t outputs);

/// mlp: Dense(hidden, activation) -> Dropout -> Dense(outputs, head) on flattened images.
/// cnn: Keras' "simple MNIST convnet": Conv2D(32, 3, relu) -> MaxPooling2D(2) -> Conv2D(64, 3,
/// relu) -> MaxPooling2D(2) -> Flatten -> Dropout -> Dense(outputs, head) on (28, 28, 1) images.
/// resnet20: applications::ResNet20 on images of any (height, width, channels) (no Dropout).
/// vit: applications::ViT on images of any (height, width, channels) with --patch, --dim,
/// --heads, --depth and --mlp (not given: ViTOptions' defaults) and the Dropout before its classifier.
/// gpt: applications::CharGPT of --dim, --heads, --depth (not given: CharGPTOptions' defaults): `image` is (sequence length,) and
/// `outputs` the vocabulary.
/// `image` is one example's (height, width, channels).
/// The last Dense has `outputs` units and `head` activation (softmax for classes, linear for
/// regression: plan_targets).
std::unique_ptr<Model> build_model(const TrainArgs& args, const Shape& image, std::int64_t outputs,
                                   const std::string& head, double dropout);

/// The shape one example of `model` takes for images of (height, width, channels).
Shape model_input_shape(const std::string& model, const Shape& image);

}  // namespace lockstep::cli
