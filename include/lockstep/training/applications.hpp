#pragma once
// Ready-made architectures (Keras' keras.applications), as functional models.
#include <memory>
#include <string>

#include "lockstep/training/functional.hpp"

namespace lockstep::applications {

struct ResNet20Options {
  /// One example's (height, width, channels): (32, 32, 3) for CIFAR-10, (28, 28, 1) for MNIST.
  Shape input_shape{32, 32, 3};
  std::int64_t classes = 10;
  /// The activation of the last Dense (Keras applications' classifier_activation): "linear"
  /// gives a regression head.
  std::string classifier_activation = "softmax";
  /// BatchNormalization(synchronized=true) everywhere: under a strategy the batch statistics are
  /// the global batch's (Keras 3's SyncBatchNorm).
  bool synchronized_batch_norm = false;
  /// Rescaling(1 / 255) right after the Input, so the model takes uint8 pixels (Keras
  /// applications' include_preprocessing).
  bool include_rescaling = false;
  std::string name = "resnet20";
};

/// ResNet-20 for small images (He et al. 2016, section 4.2; Keras' CIFAR-10 ResNet v1 example):
/// Conv3x3(16)-BN-ReLU, then 3 stages of 3 basic blocks with 16, 32 and 64 filters, each block
/// Conv3x3-BN-ReLU-Conv3x3-BN + shortcut, then ReLU. The first block of stages 2 and 3 has
/// stride 2, and its shortcut is a 1x1 convolution of stride 2 + BN; other shortcuts are the
/// identity. Then GlobalAveragePooling2D and Dense(classes, classifier_activation). Convolutions and the Dense
/// layer use he_normal initialisation; convolutions have padding "same" and no bias (each is
/// followed by a BN, whose beta takes its place). Keras' example also adds an L2 weight penalty of
/// 1e-4, which lockstep's layers do not have.
std::unique_ptr<Functional> ResNet20(const ResNet20Options& options = {});

struct CharGPTOptions {
  std::int64_t vocabulary_size = 0;  // distinct characters: the Embedding's rows and the logits
  std::int64_t sequence_length = 64;
  std::int64_t dim = 128;
  std::int64_t num_heads = 4;  // key_dim = dim / num_heads
  std::int64_t depth = 2;      // decoder blocks
  std::string name = "char_gpt";
};

/// A small causal (GPT-style) character model on (sequence_length,) integer ids:
/// Embedding(vocabulary_size, dim) -> Add()([x, PositionEmbedding(sequence_length)(x)]) -> depth
/// pre-norm blocks (x += MultiHeadAttention(num_heads, dim / num_heads, causal)(LN(x), LN(x));
/// x += Dense(dim)(Dense(4 dim, gelu)(LN(x)))) -> LayerNormalization -> Dense(vocabulary_size):
/// logits (batch, sequence_length, vocabulary_size) for SparseCategoricalCrossentropy(from_logits)
/// against next-character targets. LayerNormalizations have epsilon 1e-6.
std::unique_ptr<Functional> CharGPT(const CharGPTOptions& options);
/// What CharGPT checks before it builds anything: ValueError naming the option out of range.
void validate(const CharGPTOptions& options);

struct ViTOptions {
  /// One example's (height, width, channels); height and width must be multiples of patch_size.
  Shape input_shape{28, 28, 1};
  std::int64_t classes = 10;
  std::int64_t patch_size = 4;  // (28, 28) images: 7 x 7 = 49 tokens
  std::int64_t dim = 64;        // features per token; a multiple of num_heads
  std::int64_t num_heads = 4;
  std::int64_t depth = 4;    // encoder blocks
  std::int64_t mlp_dim = 128;  // hidden units of each block's MLP
  float dropout = 0.1f;        // before the classifier
  std::string classifier_activation = "softmax";
  std::string name = "vit";
};

/// A Vision Transformer (Dosovitskiy et al. 2020, pre-norm as Keras' ViT example) with a
/// global-average-pooled head instead of a class token:
///   Conv2D(dim, patch_size, strides=patch_size, "valid") -> Reshape((tokens, dim))
///   -> Add()([x, PositionEmbedding(tokens)(x)])
///   -> depth x [x + MultiHeadAttention(num_heads, key_dim=dim/num_heads)(LN(x), LN(x));
///               x + Dense(dim)(Dense(mlp_dim, gelu)(LN(x)))]
///   -> LayerNormalization -> GlobalAveragePooling1D -> Dropout(dropout) -> Dense(classes, classifier_activation)
/// Every LayerNormalization has epsilon 1e-6. ValueError naming the option that is out of range.
std::unique_ptr<Functional> ViT(const ViTOptions& options = {});
/// What ViT checks before it builds anything: ValueError naming the option out of range.
void validate(const ViTOptions& options);

}  // namespace lockstep::applications
