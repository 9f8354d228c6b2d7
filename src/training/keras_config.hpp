#pragma once
// config.json of a Keras 3 `.keras` archive: the Sequential or Functional architecture (and compile config) in
// Keras' own classes, argument names and serialisation (initializers and dtype policies as
// {"module", "class_name", "config"} objects), translated to and from lockstep's layers.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// What keras.Sequential.get_config() or Functional.get_config() (plus compile_config when
/// compiled) gives for `model`, which must be built. A Sequential's first layer is an InputLayer
/// with the model's input shape. ValueError naming a layer whose class Keras files cannot describe.
nlohmann::json keras_model_config(const Model& model);

/// The Sequential or Functional model that config.json `j` describes, built. Every layer class and
/// every argument is translated or refused: IOError "Keras file '<source>': layer '<name>'
/// (<class>): ..." for a class lockstep lacks (with the classes it has), an argument lockstep lacks
/// (an argument that is null or false, Keras' "off", is accepted), or a value a layer refuses; a
/// model that is neither a Sequential nor a Functional of one input and one output (a subclass) is
/// refused naming its class. The compile config, when present, compiles the model; one lockstep
/// cannot express (another optimizer, a schedule class it lacks, a metric it lacks) leaves it uncompiled with a
/// WARNING on stderr, as keras.saving.load_model does.
/// With `compile` false the compile config is not read (LoadModelOptions::compile).
std::unique_ptr<Model> model_from_keras_config(const nlohmann::json& j, const std::string& source, bool compile = true);

}  // namespace lockstep::detail
