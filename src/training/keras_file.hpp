#pragma once
// Keras 3 files: `.keras` archives (a zip of metadata.json, config.json and model.weights.h5) and
// `.weights.h5` files. The weights file holds, for every layer with or without variables (and, in a
// Functional model, its InputLayer: Keras' model.layers), the
// group layers/<class in snake_case, numbered per class: dense, dense_1, ...>/vars (attribute
// name = the layer's name) with its variables as datasets "0", "1", ... in Keras' creation order (Dense and Conv2D: kernel, bias;
// BatchNormalization: gamma, beta, moving_mean, moving_variance), and an empty top-level vars.
// A nested model (Keras' `base_model(x)`) is one layer there, numbered by its class (functional,
// sequential), its own layers' groups under it: layers/functional/layers/dense/vars.
// A compiled model's file also holds its optimizer's variables (keras_optimizer_variables.hpp).
#include <memory>
#include <string>

#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/training/model.hpp"
#include "training/keras_config.hpp"

namespace lockstep::detail {

bool is_keras_archive_path(const std::string& path);   // ends in ".keras"
bool is_keras_weights_path(const std::string& path);   // ends in ".weights.h5"

/// Writes model (a built Sequential or Functional) to `path` atomically; nothing is written on an error.
/// `with_optimizer` false leaves the optimizer's variables out (SaveModelOptions::include_optimizer).
void save_keras_archive(const Model& model, const std::string& path, bool with_optimizer = true);
/// `compile`: as LoadModelOptions::compile.
std::unique_ptr<Model> load_keras_archive(const std::string& path, bool compile = true);

/// The bytes of model.weights.h5 for `model` (and, where `with_optimizer`, its optimizer's variables).
std::string encode_keras_weights(const Model& model, bool with_optimizer = true);
/// Checks the weights file `bytes` against `model` (every layer's group, count, shapes; the
/// optimizer's variables where the model is compiled) and only then assigns them, the optimizer's
/// state too. Errors start with `source`, e.g. "Keras file 'm.keras': model.weights.h5".
void assign_keras_weights(const std::string& bytes, const std::string& source, Model& model);
/// The same, with the weights file already decoded. `file_layers`, where given, is the layers as
/// the file's config listed them (model_from_keras_config's tree): with a nested model among them,
/// the groups follow it (layers/functional/layers/dense/vars).
void assign_keras_weights(const io::H5Content& h5, const std::string& source, Model& model,
                          const KerasLayerTree* file_layers = nullptr);

}  // namespace lockstep::detail
