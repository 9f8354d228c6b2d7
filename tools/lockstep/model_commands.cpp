#include "model_commands.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep::cli {

namespace {
// A positive integer, said plainly (CLI11's PositiveNumber prints the whole range).
const CLI::Validator kPositiveInt(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || v <= 0) return "must be a positive integer, got '" + s + "'";
      return {};
    },
    "POSITIVE");

constexpr const char* kModelHelp =
    "The saved model: a folder written by save_model (model.json + weights.safetensors) or a Keras 3 "
    "FILE.keras (from keras' model.save or lockstep train --save-model)";

// Rows of features -> the model's input shape (e.g. (N, 784) for the flagship model, or
// (N, 28, 28) for one that starts with Input(28, 28) and Flatten). The feature counts must match.
Tensor to_model_input(const Tensor& features, const Model& model, const std::string& source) {
  const Shape want = model.input_shape();
  const std::int64_t n = features.dim(0);
  LOCKSTEP_CHECK(features.rank() >= 2 && features.shape().tail().numel() == want.tail().numel(), source,
                 " has shape ", features.shape().str(), " but model '", model.name(), "' expects input ", want.str(),
                 " (", want.tail().numel(), " features per example)");
  if (features.shape().tail() == want.tail()) return features;
  std::vector<std::int64_t> dims = want.dims();
  dims[0] = n;
  return features.reshape(Shape(std::move(dims)));
}

std::unique_ptr<Model> load(const ModelArgs& a) {
  auto model = load_model(a.model_dir);
  check_one_input_and_output(*model, a.model_dir);
  std::fprintf(stderr, "Loaded model '%s' from %s (%lld parameters)\n", model->name().c_str(), a.model_dir.c_str(),
               static_cast<long long>(model->count_params()));
  return model;
}
}  // namespace

void check_one_input_and_output(const Model& model, const std::string& path) {
  const Structure& in = model.input_structure();
  const Structure& out = model.output_structure();
  LOCKSTEP_CHECK(in.size() == 1 && out.size() == 1, "--model '", path, "' has ", in.size(), " input(s) (", in.joined(),
                 ") and ", out.size(), " output(s) (", out.joined(), "); the lockstep command takes models of one "
                 "input and one output (train this one from C++ or Python: fit with one tensor per input and output)");
}

void add_model_commands(CLI::App& app, ModelArgs& a) {
  auto* ev = app.add_subcommand(
      "evaluate", "Evaluate a saved model (a save_model folder or a .keras file) on the test split of MNIST or "
                  "Fashion-MNIST, with the images flattened and scaled to [0, 1] as `lockstep train` does (by the "
                  "model itself when it starts with Rescaling: it is given the uint8 pixels).");
  ev->add_option("--model", a.model_dir, kModelHelp)->required();
  ev->add_option("--dataset", a.dataset, "mnist or fashion_mnist")
      ->check(CLI::IsMember({"mnist", "fashion_mnist"}))
      ->capture_default_str();
  ev->add_option("--data", a.data, "Evaluate on the x_test / y_test arrays of this .npz instead of --dataset");
  ev->add_option("--batch-size", a.batch_size, "Batch size")->check(kPositiveInt)->capture_default_str();
  ev->add_option("--metrics-out", a.metrics_out, "Write {test_loss, test_<metric>, ...} as JSON to this file");

  auto* pr = app.add_subcommand(
      "predict", "Run a saved model on the examples of a .npy file: uint8 images are flattened and scaled to "
                 "[0, 1] (by the model when it starts with Rescaling), float32 arrays are used as they are. "
                 "Prints the predicted class of each example, one per line, or writes the model's outputs to "
                 "--output.");
  pr->add_option("--model", a.model_dir, kModelHelp)->required();
  pr->add_option("--input", a.input, ".npy file: uint8 images (N, ...) or float32 features (N, ...)")->required();
  pr->add_option("--output", a.output, "Write the outputs (e.g. class probabilities) to this .npy file");
  pr->add_option("--batch-size", a.batch_size, "Batch size")->check(kPositiveInt)->capture_default_str();
}

int run_evaluate(const ModelArgs& a) {
  if (!a.metrics_out.empty()) io::check_output_path(a.metrics_out, "--metrics-out");
  auto model = load(a);
  LOCKSTEP_CHECK(model->compiled(), "the model in '", a.model_dir,
                 "' was saved before it was compiled, so it has no loss to evaluate; compile it before save_model");
  // A model trained with another loss (lockstep train --loss) is evaluated on its kind of targets.
  const bool labels_only = model->loss()->name() == "sparse_categorical_crossentropy";
  const datasets::TrainTest data = !a.data.empty()      ? datasets::load_npz(a.data, {.any_targets = !labels_only})
                                    : a.dataset == "mnist" ? datasets::mnist::load_data()
                                                           : datasets::fashion_mnist::load_data();
  const std::string source = a.data.empty() ? "the " + a.dataset + " test split" : "x_test of '" + a.data + "'";
  // uint8 pixels stay uint8 until a batch needs them (image_slices): no float32 copy of the set.
  const bool rescales = rescales_its_input(*model);
  const Tensor x = to_model_input(flatten_images_for(data.test.x, rescales || data.test.x.dtype() == DType::kU8),
                                  *model, source);
  // As Keras does: a label the model has no output for is an error, not a wrong loss (one output
  // is a binary model: labels 0 and 1).
  const std::int64_t outputs = std::max<std::int64_t>(model->output_shape()[-1], 2);
  const bool classifier = model->loss()->name().find("crossentropy") != std::string::npos;
  const auto labels = classifier && data.test.y.dtype() == DType::kI64 ? data.test.y.to_vector<std::int64_t>()
                                                                       : std::vector<std::int64_t>();
  for (std::size_t i = 0; i < labels.size(); ++i)
    LOCKSTEP_CHECK(labels[i] < outputs, a.data.empty() ? a.dataset : "--data '" + a.data + "'", ": y_test[", i,
                   "] is ", labels[i], " but the model in '", a.model_dir, "' has ", outputs, " classes (0 to ",
                   outputs - 1, ")");
  const Logs logs = model->evaluate(image_slices(x, data.test.y, rescales).batch(a.batch_size));
  std::string line = "test_loss: ";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", logs.at("loss"));
  line += buf;
  nlohmann::json j = {{"test_loss", logs.at("loss")}};
  for (const auto& m : model->metrics()) {
    const std::string& name = m.log_name;
    std::snprintf(buf, sizeof buf, "%.4f", logs.at(name));
    line += " - test_" + name + ": " + buf;
    j["test_" + name] = logs.at(name);
  }
  std::printf("%s\n", line.c_str());
  if (!a.metrics_out.empty()) {
    j["model"] = a.model_dir;
    j["dataset"] = a.data.empty() ? a.dataset : a.data;
    j["examples"] = x.dim(0);
    io::write_file_atomic(a.metrics_out, j.dump(2) + "\n");
  }
  return 0;
}

int run_predict(const ModelArgs& a) {
  if (!a.output.empty()) io::check_output_path(a.output, "--output");
  auto model = load(a);
  const Tensor raw = data::read_npy(a.input);
  const std::string source = "--input '" + a.input + "'";
  LOCKSTEP_CHECK(raw.rank() >= 2, source, " has shape ", raw.shape().str(), " but model '", model->name(),
                 "' expects input ", model->input_shape().str(),
                 ": give a batch of examples (a single one as shape (1, ...))");
  LOCKSTEP_CHECK(raw.dim(0) > 0, source, " has shape ", raw.shape().str(), ": it holds no examples to predict");
  Tensor x;
  if (raw.dtype() == DType::kU8) {
    x = flatten_images_for(raw, rescales_its_input(*model));
  } else {
    // Integer arrays are ambiguous (pixels 0-255, or features?): ask for an explicit dtype.
    LOCKSTEP_CHECK(raw.dtype() == DType::kF32, source, " holds ", dtype_name(raw.dtype()),
                   "; give uint8 images (scaled to [0, 1], by the model if it starts with Rescaling) or float32 "
                   "features (used as they are)");
    x = raw;
  }
  x = to_model_input(x, *model, source);
  const Tensor out = model->predict(x, {.batch_size = a.batch_size});
  if (!a.output.empty()) {
    io::write_file_atomic(a.output, data::encode_npy(out, "--output '" + a.output + "'"));
    std::fprintf(stderr, "Wrote outputs %s to %s\n", out.shape().str().c_str(), a.output.c_str());
    return 0;
  }
  const Tensor classes = argmax(out, -1);
  std::string text;
  for (const auto c : classes.to_vector<std::int64_t>()) text += std::to_string(c) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace lockstep::cli
