#include "lockstep/training/applications.hpp"

#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/layer_normalization.hpp"
#include "lockstep/layers/merge_layers.hpp"
#include "lockstep/layers/multi_head_attention.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/layers/position_embedding.hpp"
#include "lockstep/layers/sequence_layers.hpp"

namespace lockstep::applications {

std::unique_ptr<Functional> ResNet20(const ResNet20Options& o) {
  LOCKSTEP_CHECK(o.input_shape.rank() == 3, "ResNet20: input_shape must be (height, width, channels), got ",
                 o.input_shape.str());
  LOCKSTEP_CHECK(o.classes >= 1, "ResNet20: classes must be positive, got ", o.classes);
  // Conv (no bias: the BN's beta is one) -> BN, optionally followed by ReLU.
  const auto conv_bn = [&](const KerasTensor& x, std::int64_t filters, std::int64_t kernel, std::int64_t stride) {
    const auto conv = layers::Conv2D({.filters = filters, .kernel_size = {kernel, kernel}, .strides = {stride, stride},
                                      .padding = "same", .use_bias = false, .kernel_initializer = "he_normal"});
    return call(layers::BatchNormalization({.synchronized = o.synchronized_batch_norm}), call(conv, x));
  };
  const auto relu = [](const KerasTensor& x) { return call(layers::Activation("relu"), x); };

  const KerasTensor inputs = Input(o.input_shape);
  const KerasTensor scaled = o.include_rescaling ? call(layers::Rescaling(1.0f / 255.0f), inputs) : inputs;
  KerasTensor x = relu(conv_bn(scaled, 16, 3, 1));
  std::int64_t filters = 16;
  for (int stage = 0; stage < 3; ++stage, filters *= 2) {
    for (int block = 0; block < 3; ++block) {
      const std::int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      const KerasTensor y = conv_bn(relu(conv_bn(x, filters, 3, stride)), filters, 3, 1);
      const KerasTensor shortcut = stride == 1 ? x : conv_bn(x, filters, 1, stride);
      x = relu(call(layers::Add(), {shortcut, y}));  // Keras' example: add([x, y])
    }
  }
  x = call(layers::GlobalAveragePooling2D(), x);
  const KerasTensor outputs =
      call(layers::Dense({.units = o.classes, .activation = o.classifier_activation, .kernel_initializer = "he_normal"}), x);
  return std::make_unique<Functional>(inputs, outputs, o.name);
}

void validate(const CharGPTOptions& o) {
  LOCKSTEP_CHECK(o.vocabulary_size >= 2, "CharGPT: vocabulary_size must be at least 2, got ", o.vocabulary_size);
  LOCKSTEP_CHECK(o.sequence_length >= 1 && o.depth >= 1 && o.num_heads >= 1 && o.dim >= 1,
                 "CharGPT: sequence_length, dim, num_heads and depth must be positive");
  LOCKSTEP_CHECK(o.dim % o.num_heads == 0, "CharGPT: dim ", o.dim, " must be a multiple of num_heads ", o.num_heads);
}

std::unique_ptr<Functional> CharGPT(const CharGPTOptions& o) {
  validate(o);
  const auto norm = [](const KerasTensor& x) { return call(layers::LayerNormalization({.epsilon = 1e-6f}), x); };
  const auto add = [](const KerasTensor& a, const KerasTensor& b) { return call(layers::Add(), {a, b}); };
  const KerasTensor inputs = Input(Shape{o.sequence_length});
  KerasTensor x = call(layers::Embedding(o.vocabulary_size, o.dim), inputs);
  x = add(x, call(layers::PositionEmbedding(o.sequence_length), x));
  for (std::int64_t block = 0; block < o.depth; ++block) {
    KerasTensor y = norm(x);
    const auto attention = layers::MultiHeadAttention({.num_heads = o.num_heads, .key_dim = o.dim / o.num_heads});
    x = add(x, call(attention, {y, y}, {.use_causal_mask = true}));
    y = call(layers::Dense(4 * o.dim, "gelu"), norm(x));
    x = add(x, call(layers::Dense(o.dim), y));
  }
  const KerasTensor logits = call(layers::Dense(o.vocabulary_size), norm(x));
  return std::make_unique<Functional>(inputs, logits, o.name);
}

void validate(const ViTOptions& o) {
  const Shape& s = o.input_shape;
  LOCKSTEP_CHECK(s.rank() == 3, "ViT: input_shape must be (height, width, channels), got ", s.str());
  LOCKSTEP_CHECK(o.patch_size >= 1 && s[0] % o.patch_size == 0 && s[1] % o.patch_size == 0 && s[0] > 0 && s[1] > 0,
                 "ViT: patch_size ", o.patch_size, " must divide the image's height and width, ", s.str());
  LOCKSTEP_CHECK(o.num_heads >= 1 && o.dim >= 1 && o.dim % o.num_heads == 0, "ViT: dim ", o.dim,
                 " must be a positive multiple of num_heads ", o.num_heads);
  LOCKSTEP_CHECK(o.depth >= 1 && o.mlp_dim >= 1 && o.classes >= 1, "ViT: depth (", o.depth, "), mlp_dim (",
                 o.mlp_dim, ") and classes (", o.classes, ") must be positive");
}

std::unique_ptr<Functional> ViT(const ViTOptions& o) {
  validate(o);
  const Shape& s = o.input_shape;
  const std::int64_t tokens = (s[0] / o.patch_size) * (s[1] / o.patch_size);
  const auto norm = [](const KerasTensor& x) { return call(layers::LayerNormalization({.epsilon = 1e-6f}), x); };

  const KerasTensor inputs = Input(s);
  KerasTensor x = call(layers::Conv2D({.filters = o.dim,
                                       .kernel_size = {o.patch_size, o.patch_size},
                                       .strides = {o.patch_size, o.patch_size},
                                       .padding = "valid"}),
                       inputs);
  x = call(layers::Reshape(Shape{tokens, o.dim}), x);
  x = call(layers::Add(), {x, call(layers::PositionEmbedding(tokens), x)});
  for (std::int64_t block = 0; block < o.depth; ++block) {
    KerasTensor y = norm(x);
    y = call(layers::MultiHeadAttention({.num_heads = o.num_heads, .key_dim = o.dim / o.num_heads}), {y, y});
    x = call(layers::Add(), {x, y});
    y = call(layers::Dense(o.mlp_dim, "gelu"), norm(x));
    x = call(layers::Add(), {x, call(layers::Dense(o.dim), y)});
  }
  x = call(layers::Dropout(o.dropout), call(layers::GlobalAveragePooling1D(), norm(x)));
  const KerasTensor outputs = call(layers::Dense(o.classes, o.classifier_activation), x);
  return std::make_unique<Functional>(inputs, outputs, o.name);
}

}  // namespace lockstep::applications
