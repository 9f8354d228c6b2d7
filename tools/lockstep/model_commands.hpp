#pragma once
// `lockstep evaluate` and `lockstep predict`: use a model saved with save_model (a folder with
// model.json and weights.safetensors) without the code that made it.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace lockstep {
class Model;
}

namespace lockstep::cli {

struct ModelArgs {
  std::string model_dir;              // --model: the saved model's folder
  std::string dataset = "mnist";      // evaluate: mnist or fashion_mnist (its test split)
  std::string data;                   // evaluate: an .npz's x_test / y_test instead of --dataset
  std::int64_t batch_size = 1024;
  std::string metrics_out;            // evaluate: JSON file for the results
  std::string input;                  // predict: .npy of uint8 images or float32 features
  std::string output;                 // predict: .npy for the probabilities (else classes to stdout)
};

/// Adds the `evaluate` and `predict` subcommands; both fill `args`.
void add_model_commands(CLI::App& app, ModelArgs& args);
int run_evaluate(const ModelArgs& args);
int run_predict(const ModelArgs& args);
/// The commands feed one tensor of examples and one of targets: ValueError naming the inputs and
/// outputs of a model (from `path`) of several.
void check_one_input_and_output(const Model& model, const std::string& path);

}  // namespace lockstep::cli
