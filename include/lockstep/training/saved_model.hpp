#pragma once
// Saved models: everything needed to use a Sequential or Functional model again, with no code that describes it
// (Keras' model.save / keras.saving.load_model), in one of two formats, chosen by the path:
//   PATH.keras   a Keras 3 archive (zip of metadata.json, config.json, model.weights.h5), which
//                Keras loads and writes; weights, compile config and the optimizer's variables
//                (Keras 3's optimizer/vars: step count, rate, slots, a loss scale's state)
//   any other    a folder in lockstep's own format, described below (optimizer state included)
//   DIR/weights.safetensors  the variables by name ("dense/kernel") and, when the model is compiled,
//                            the optimizer's slots ("optimizer/dense/kernel/m")
//   DIR/model.json           format version; the architecture as Keras writes it ({"class_name":
//                            "Sequential", "config": {"name", "build_input_shape", "layers": [...]}}, or
//                            "Functional" with each layer's "inbound_nodes", "input_layers" and
//                            "output_layers", as Keras 3's Functional.get_config());
//                            the compile config (optimizer class and options, loss and from_logits,
//                            metric names, optimizer iterations); the seed; the tensor list; and the
//                            CRC-32C and size of weights.safetensors
// Both are written atomically, the weights first and model.json last, so model.json never points
// at weights that are not on disk; a crash between the two leaves an old model.json whose checksum
// no longer matches the new weights, which load reports instead of loading a mix.
#include <memory>
#include <string>

#include "lockstep/training/functional.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep {

/// Bumped whenever the files' meaning changes; load_model refuses any other version.
inline constexpr int kSavedModelFormatVersion = 1;

struct SaveModelOptions {
  /// Also save the optimizer's slots and step count, so training resumes exactly (Keras'
  /// include_optimizer). The compile config itself is always saved when the model is compiled.
  bool include_optimizer = true;
};

/// Saves `model` (a built Sequential or a Functional of lockstep's layers) to `dir`, creating it;
/// when `dir` ends in ".keras", as the Keras 3 archive of that name instead (written atomically; its compile
/// config is Keras', and its optimizer's variables are Keras 3's, unless include_optimizer is false). A learning-rate schedule Keras has a class for
/// (optimizers::schedules::serialize) is saved as Keras saves it and comes back on load; any other
/// schedule (it is code) is saved as the learning rate current at save time. Throws ValueError, before writing anything, for a
/// model that is not a built Sequential or Functional or holds a layer of another class (naming it); IOError
/// when a file cannot be written (the previous files are then left as they were).
void save_model(Model& model, const std::string& dir, const SaveModelOptions& options = {});

/// Rebuilds the Sequential or Functional saved in `dir`, builds it, checks every variable (and optimizer slot)
/// against weights.safetensors by name, shape and dtype, and only then assigns them; recompiles
/// it when model.json has a compile config (restoring the optimizer's slots and step when saved).
/// Every problem is an IOError naming the file and the problem: a missing folder or file, invalid
/// JSON, a wrong format version, a missing or mistyped field, an unknown layer, optimizer or loss
/// class, a config value a layer refuses (naming the layer's index), a missing, extra or
/// mis-shaped tensor, or weights that do not match model.json's size and checksum.
/// A path ending in ".keras" is read as a Keras 3 archive: the architecture from config.json
/// (every layer class and argument translated, or an IOError naming the file, the layer, its class
/// and the argument), the weights from model.weights.h5 (checked by count and shape, then
/// assigned), compiled from its compile config when lockstep has its optimizer, loss and metrics
/// (else uncompiled, with a WARNING, as Keras), and its optimizer's variables restored, so that fit
/// continues as if never saved (a file without them, or saved before the first step, gives a fresh
/// optimizer; one whose count differs is skipped with a WARNING, as Keras 3 skips it). A truncated
/// or corrupt archive, or an optimizer variable of another shape or dtype, is an IOError naming
/// the file and the problem.
struct LoadModelOptions {
  /// Keras' load_model(compile=False): the model comes back uncompiled, its compile config
  /// unread (no WARNING about one lockstep cannot express) and a saved optimizer state unused;
  /// for a caller that compiles the model itself.
  bool compile = true;
};
std::unique_ptr<Model> load_model(const std::string& dir, const LoadModelOptions& options = {});

/// True when save_model / load_model treat `path` as a Keras archive (it ends in ".keras").
bool is_keras_file(const std::string& path);

/// Keras' model.save_weights / load_weights: a `.weights.h5` file (the HDF5 layout of a .keras
/// archive's model.weights.h5, a compiled model's optimizer variables included, as Keras 3's),
/// written atomically. load_weights checks every layer's weights by count and shape (and the
/// optimizer's variables, into a compiled model) before assigning any: IOError naming the file and
/// the weight otherwise.
/// ValueError for a path not ending in ".weights.h5" (Keras' rule) or a model that is not a built
/// Sequential or Functional.
void save_weights(const Model& model, const std::string& path);
void load_weights(Model& model, const std::string& path);

}  // namespace lockstep
