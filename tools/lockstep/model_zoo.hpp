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
/// Keras' example).
double default_dropout(const std::string& model);

/// mlp: Dense(hidden, activation) -> Dropout -> Dense(outputs, head) on flattened images.
/// cnn: Keras' "simple MNIST convnet": Conv2D(32, 3, relu) -> MaxPooling2D(2) -> Conv2D(64, 3,
/// relu) -> MaxPooling2D(2) -> Flatten -> Dropout -> Dense(outputs, head) on (28, 28, 1) images.
/// resnet20: applications::ResNet20 on images of any (height, width, channels) (no Dropout).
/// vit: applications::ViT on images of any (height, width, channels) with --patch, --dim,
/// --heads, --depth and --mlp (0: ViTOptions' defaults) and the Dropout before its classifier.
/// gpt: applications::CharGPT of --dim, --heads, --depth (0: CharGPTOptions' defaults): `image` is (sequence length,) and
/// `outputs` the vocabulary.
/// `image` is one example's (height, width, channels).
/// The last Dense has `outputs` units and `head` activation (softmax for classes, linear for
/// regression: plan_targets).
std::unique_ptr<Model> build_model(const TrainArgs& args, const Shape& image, std::int64_t outputs,
                                   const std::string& head, double dropout);

/// The shape one example of `model` takes for images of (height, width, channels).
Shape model_input_shape(const std::string& model, const Shape& image);

}  // namespace lockstep::cli
