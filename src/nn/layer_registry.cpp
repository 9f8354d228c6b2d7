#include "lockstep/layers/layer_registry.hpp"

#include <map>
#include <mutex>

#include "lockstep/layers/activation_layers.hpp"
#include "lockstep/layers/bidirectional.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/group_normalization.hpp"
#include "lockstep/layers/layer_normalization.hpp"
#include "lockstep/layers/merge_layers.hpp"
#include "lockstep/layers/multi_head_attention.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/layers/position_embedding.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/layers/random_affine_layers.hpp"
#include "lockstep/layers/recurrent_layers.hpp"
#include "lockstep/layers/regularization_layers.hpp"
#include "lockstep/layers/sequence_layers.hpp"

namespace lockstep::layers {

namespace {
using nlohmann::json;

// Keras' image layers take a data_format; lockstep's are NHWC only.
const json kChannelsLast = {{"data_format", "channels_last"}};

// The recurrent layers' Keras arguments lockstep does not run (recurrent_layers.hpp): a .keras
// file that sets one is refused naming it.
const json kRecurrentFixed = {{"stateful", false}, {"unroll", false}};

// Keras' SpatialDropout1D / 2D / 3D constructors take no trainable (spatial_dropout.py).
const std::vector<std::string> kSpatialDropoutNotTaken = {"trainable"};

// One row per layer class lockstep has.
std::vector<LayerClass> builtin_classes() {
  return {
      {"InputLayer", &InputLayer::from_config},
      {"Dense", &DenseLayer::from_config},
      {"Dropout", &DropoutLayer::from_config},
      {"Activation", &ActivationLayer::from_config},
      {"Flatten", &FlattenLayer::from_config, kChannelsLast},
      {"Reshape", &ReshapeLayer::from_config},
      {"Conv2D", &Conv2DLayer::from_config, kChannelsLast},
      {"DepthwiseConv2D", &DepthwiseConv2DLayer::from_config, kChannelsLast},
      {"MaxPooling2D", [](const json& c) { return Pooling2DLayer::from_config(true, c); }, kChannelsLast},
      {"AveragePooling2D", [](const json& c) { return Pooling2DLayer::from_config(false, c); }, kChannelsLast},
      {"GlobalAveragePooling2D", [](const json& c) { return GlobalPooling2DLayer::from_config(false, c); }, kChannelsLast},
      {"GlobalMaxPooling2D", [](const json& c) { return GlobalPooling2DLayer::from_config(true, c); }, kChannelsLast},
      {"Conv1D", &Conv1DLayer::from_config, kChannelsLast},
      {"MaxPooling1D", [](const json& c) { return Pooling1DLayer::from_config(true, c); }, kChannelsLast},
      {"AveragePooling1D", [](const json& c) { return Pooling1DLayer::from_config(false, c); }, kChannelsLast},
      {"ZeroPadding2D", &ZeroPadding2DLayer::from_config, kChannelsLast},
      {"Rescaling", &RescalingLayer::from_config},
      {"BatchNormalization", &BatchNormalizationLayer::from_config},
      {"LayerNormalization", &LayerNormalizationLayer::from_config},
      {"Add", &AddLayer::from_config},
      // Attention over the length axis of [batch, length, features] (Keras' default for rank 3).
      {"MultiHeadAttention", &MultiHeadAttentionLayer::from_config, {{"attention_axes", json::array({1})}}},
      {"Softmax", &SoftmaxLayer::from_config},
      {"Masking", &MaskingLayer::from_config},
      {"Embedding", &EmbeddingLayer::from_config},
      {"GlobalAveragePooling1D", &GlobalAveragePooling1DLayer::from_config, kChannelsLast},
      {"GlobalMaxPooling1D", &GlobalMaxPooling1DLayer::from_config, kChannelsLast},
      {"RepeatVector", &RepeatVectorLayer::from_config},
      {"Permute", &PermuteLayer::from_config},
      {"Concatenate", &ConcatenateLayer::from_config},
      {"Dot", &DotLayer::from_config},
      {"Multiply", [](const json& c) { return ElementwiseMergeLayer::from_config(ElementwiseMergeLayer::Kind::kMultiply, c); }},
      {"Subtract", [](const json& c) { return ElementwiseMergeLayer::from_config(ElementwiseMergeLayer::Kind::kSubtract, c); }},
      {"Average", [](const json& c) { return ElementwiseMergeLayer::from_config(ElementwiseMergeLayer::Kind::kAverage, c); }},
      {"Maximum", [](const json& c) { return ElementwiseMergeLayer::from_config(ElementwiseMergeLayer::Kind::kMaximum, c); }},
      {"Minimum", [](const json& c) { return ElementwiseMergeLayer::from_config(ElementwiseMergeLayer::Kind::kMinimum, c); }},
      // keras_hub.layers.PositionEmbedding (Keras writes it registered as "keras_hub>PositionEmbedding").
      {"PositionEmbedding", &PositionEmbeddingLayer::from_config},
      {"SimpleRNN", &SimpleRNNLayer::from_config, kRecurrentFixed},
      {"LSTM", &LSTMLayer::from_config, kRecurrentFixed},
      {"GRU", &GRULayer::from_config, kRecurrentFixed},
      {"Bidirectional", &BidirectionalLayer::from_config},
      // Keras 3's advanced activations and SeparableConv2D.
      {"ReLU", &ReLULayer::from_config},
      {"LeakyReLU", &LeakyReLULayer::from_config},
      {"ELU", &ELULayer::from_config},
      {"PReLU", &PReLULayer::from_config},
      {"SeparableConv2D", &SeparableConv2DLayer::from_config, kChannelsLast},
      // The decoder side of autoencoders and U-Nets.
      {"Conv2DTranspose", &Conv2DTransposeLayer::from_config, kChannelsLast},
      {"UpSampling2D", &UpSampling2DLayer::from_config, kChannelsLast},
      {"UpSampling1D", &UpSampling1DLayer::from_config},
      {"Cropping2D", &Cropping2DLayer::from_config, kChannelsLast},
      {"ZeroPadding1D", &ZeroPadding1DLayer::from_config, kChannelsLast},
      // The rest of Keras 3's 1D convolution family.
      {"Conv1DTranspose", &Conv1DTransposeLayer::from_config, kChannelsLast},
      {"DepthwiseConv1D", &DepthwiseConv1DLayer::from_config, kChannelsLast},
      {"SeparableConv1D", &SeparableConv1DLayer::from_config, kChannelsLast},
      {"Cropping1D", &Cropping1DLayer::from_config},
      // Keras 3's other regularization and normalization layers (regularization_layers.hpp,
      // group_normalization.hpp); a seed given to one is its own stream of draws, as Dropout's.
      {"SpatialDropout1D", [](const json& c) { return SpatialDropoutLayer::from_config(1, c); }, json::object(),
       kSpatialDropoutNotTaken},
      {"SpatialDropout2D", [](const json& c) { return SpatialDropoutLayer::from_config(2, c); }, json::object(),
       kSpatialDropoutNotTaken},
      {"GaussianNoise", &GaussianNoiseLayer::from_config},
      {"GaussianDropout", &GaussianDropoutLayer::from_config},
      {"AlphaDropout", &AlphaDropoutLayer::from_config},
      {"Identity", &IdentityLayer::from_config},
      {"GroupNormalization", &GroupNormalizationLayer::from_config},
      {"UnitNormalization", &UnitNormalizationLayer::from_config},
      // Keras 3's preprocessing layers inside a model.
      {"Normalization", &NormalizationLayer::from_config},
      {"RandomFlip", &RandomFlipLayer::from_config, kChannelsLast},
      {"Resizing", &ResizingLayer::from_config, {{"data_format", "channels_last"}, {"fill_mode", "constant"}}},
      {"CenterCrop", &CenterCropLayer::from_config, kChannelsLast},
      {"RandomCrop", &RandomCropLayer::from_config, kChannelsLast},
      // Keras 3's SpatialDropout3D (regularization_layers.hpp) and the color augmentations
      // RandomContrast and RandomBrightness (preprocessing_layers.hpp: their seed is their own).
      {"SpatialDropout3D", [](const json& c) { return SpatialDropoutLayer::from_config(3, c); }, json::object(),
       kSpatialDropoutNotTaken},
      {"RandomContrast", &RandomContrastLayer::from_config, kChannelsLast},
      {"RandomBrightness", &RandomBrightnessLayer::from_config, kChannelsLast},
      // Keras 3's geometric augmentations (random_affine_layers.hpp: their seed is their own).
      {"RandomTranslation", &RandomTranslationLayer::from_config, kChannelsLast},
      {"RandomRotation", &RandomRotationLayer::from_config, kChannelsLast},
      {"RandomZoom", &RandomZoomLayer::from_config, kChannelsLast},
  };
}

struct Registry {
  Registry() {
    for (auto& c : builtin_classes()) classes.emplace(c.class_name, std::move(c));
  }
  std::mutex mutex;
  std::map<std::string, LayerClass> classes;
};

Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

std::optional<LayerClass> find_layer_class(const std::string& class_name) {
  auto& r = registry();
  const std::lock_guard lock(r.mutex);
  const auto it = r.classes.find(class_name);
  if (it == r.classes.end()) return std::nullopt;
  return it->second;
}

std::string layer_class_names() {
  auto& r = registry();
  const std::lock_guard lock(r.mutex);
  std::string names;
  for (const auto& [name, c] : r.classes) names += (names.empty() ? "" : ", ") + name;
  return names;
}

void register_layer_class(LayerClass layer_class) {
  LOCKSTEP_CHECK(!layer_class.class_name.empty(), "register_layer_class: the class name is empty");
  LOCKSTEP_CHECK(static_cast<bool>(layer_class.from_config), "register_layer_class: class '",
                 layer_class.class_name, "' has no from_config");
  auto& r = registry();
  const std::lock_guard lock(r.mutex);
  const std::string name = layer_class.class_name;
  LOCKSTEP_CHECK(r.classes.emplace(name, std::move(layer_class)).second, "register_layer_class: class '", name,
                 "' is registered already");
}

json shape_to_json(const Shape& s) {
  json j = json::array();
  for (auto d : s.dims()) j.push_back(d < 0 ? json(nullptr) : json(d));
  return j;
}

Shape shape_from_json(const json& j) {
  if (!j.is_array()) throw json::type_error::create(302, "a shape must be a list, got " + j.dump(), &j);
  std::vector<std::int64_t> dims;
  for (const auto& d : j) dims.push_back(d.is_null() ? -1 : d.get<std::int64_t>());
  return Shape(std::move(dims));
}

void check_last_axis(const json& config, const std::string& class_name) {
  const json& axis = config.value("axis", json(-1));
  if (axis != json(-1) && axis != json::array({-1}))
    throw ValueError(class_name + " axis " + axis.dump() + " is not supported (only the last axis, -1)");
}

}  // namespace lockstep::layers
