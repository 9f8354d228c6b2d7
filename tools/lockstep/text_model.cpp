#include "text_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep::cli {

namespace fs = std::filesystem;

std::vector<std::string> text_paths(const std::string& text_flag) {
  if (!text_flag.empty()) return {text_flag};
  std::error_code ec;
  LOCKSTEP_CHECK_T(IOError, fs::is_directory(kDefaultTextDir, ec), "--text not given and the default text folder ",
                   kDefaultTextDir, " (Debian's base-files) does not exist; give --text FILE");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kDefaultTextDir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  std::set<fs::path> seen;  // GPL is a link to GPL-3: each text once
  for (const auto& f : files)
    if (seen.insert(fs::canonical(f)).second) out.push_back(f.string());
  LOCKSTEP_CHECK_T(IOError, !out.empty(), "--text not given and ", kDefaultTextDir, " holds no files; give --text FILE");
  return out;
}

data::CharText load_text(const TrainArgs& a) {
  return data::read_char_text(text_paths(a.text), {.sequence_length = a.sequence_length});
}

datasets::TrainTest text_splits(const data::CharText& text) {
  return {.train = {text.x_train, text.y_train}, .test = {text.x_validation, text.y_validation}};
}

TargetPlan text_targets(const data::CharText& text) {
  return {.loss = "sparse_categorical_crossentropy",
          .outputs = text.vocabulary.size(),
          .activation = "linear",
          .class_labels = true,
          .metrics = {"accuracy"}};
}

std::string vocabulary_path(const std::string& model_path) {
  if (is_keras_file(model_path)) return fs::path(model_path).replace_extension(".vocabulary.json").string();
  return (fs::path(model_path) / "vocabulary.json").string();
}

void save_vocabulary(const std::string& model_path, const data::CharVocabulary& vocabulary) {
  const nlohmann::json j = {{"characters", vocabulary.utf8()}};
  io::write_file_atomic(vocabulary_path(model_path), j.dump(1) + "\n");
}

namespace {
// --model: a run directory (its model/ folder), a saved-model folder or FILE.keras.
std::string model_path_of(const std::string& given) {
  if (!is_keras_file(given) && fs::is_directory(fs::path(given) / "model") && !fs::exists(fs::path(given) / "model.json"))
    return (fs::path(given) / "model").string();
  return given;
}

data::CharVocabulary load_vocabulary(const std::string& model_path) {
  const std::string path = vocabulary_path(model_path);
  LOCKSTEP_CHECK_T(IOError, fs::exists(path), "no vocabulary beside the model '", model_path, "': ", path,
                   " does not exist (a character model trained by `lockstep train --model gpt` has one)");
  const std::string what = "vocabulary '" + path + "'";
  const nlohmann::json j = io::detail::parse_json(io::read_file(path), what);
  return data::CharVocabulary::from_utf8(io::detail::string_field(j, "characters", what), what);
}

// One character id from `logits`: the most likely at temperature 0, else drawn from
// softmax(logits / temperature).
std::int64_t sample(const std::vector<float>& logits, double temperature, std::mt19937_64& rng) {
  const auto top = std::max_element(logits.begin(), logits.end());
  if (temperature == 0) return top - logits.begin();
  std::vector<double> p(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp((logits[i] - *top) / temperature);
  double u = std::uniform_real_distribution<double>(0, total)(rng);
  for (std::size_t i = 0; i < p.size(); ++i)
    if ((u -= p[i]) < 0) return static_cast<std::int64_t>(i);
  return top - logits.begin();  // rounding left u >= 0: the largest
}
}  // namespace

void add_generate_command(CLI::App& app, GenerateArgs& a) {
  auto* cmd = app.add_subcommand(
      "generate", "Sample text from a character model trained by `lockstep train --model gpt`: prints the prompt "
                  "followed by --length generated characters.");
  cmd->add_option("--model", a.model,
                  "The trained model: its run directory (--logdir), its saved-model folder or FILE.keras "
                  "(--save-model), with the vocabulary saved beside it")
      ->required();
  cmd->add_option("--prompt", a.prompt, "Text to continue, of characters of the model's vocabulary (default: a newline)");
  cmd->add_option("--length", a.length, "Characters to generate")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--temperature", a.temperature,
                  "Sampling temperature: logits are divided by it before the softmax; 0 takes the most likely "
                  "character each time")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of the sampling: the same seed gives the same text (default: a random one)")
      ->check(seed_validator());
}

int run_generate(const GenerateArgs& a) {
  LOCKSTEP_CHECK(std::isfinite(a.temperature), "--temperature must be a finite number >= 0");
  LOCKSTEP_CHECK_T(IOError, fs::exists(a.model), "--model '", a.model, "' does not exist");
  const std::string model_path = model_path_of(a.model);
  const data::CharVocabulary vocabulary = load_vocabulary(model_path);
  const auto model = load_model(model_path, {.compile = false});
  const Shape in = model->input_shape(), out = model->output_shape();
  LOCKSTEP_CHECK(in.rank() == 2 && out.rank() == 3 && out[-1] == vocabulary.size(), "the model in '", model_path,
                 "' takes ", in.str(), " and gives ", out.str(), ", not a character model of the vocabulary's ",
                 vocabulary.size(), " characters: (None, sequence length) ids to (None, sequence length, ",
                 vocabulary.size(), ") logits");
  const std::int64_t window = in[1];
  const std::string prompt = a.prompt.empty() ? "\n" : a.prompt;
  std::vector<std::int32_t> ids = vocabulary.encode(data::decode_utf8(prompt, "--prompt"), "--prompt");
  std::mt19937_64 rng(a.seed ? *a.seed : std::random_device{}());
  std::vector<std::int64_t> generated;
  for (std::int64_t step = 0; step < a.length; ++step) {
    // The last `window` characters at the start of the input; causal attention makes the
    // padding after them irrelevant to the last one's logits.
    const std::int64_t used = std::min<std::int64_t>(window, static_cast<std::int64_t>(ids.size()));
    std::vector<std::int32_t> context(static_cast<std::size_t>(window), 0);
    std::copy(ids.end() - used, ids.end(), context.begin());
    const Tensor logits = model->predict(Tensor::from_vector(context, Shape{1, window}), {.batch_size = 1});
    const std::vector<float> all = logits.to(DType::kF32).to_vector<float>();
    const auto row = all.begin() + (used - 1) * vocabulary.size();
    const std::int64_t next = sample(std::vector<float>(row, row + vocabulary.size()), a.temperature, rng);
    ids.push_back(static_cast<std::int32_t>(next));
    generated.push_back(next);
  }
  const std::string text = (a.prompt.empty() ? std::string() : prompt) + vocabulary.decode(generated);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

}  // namespace lockstep::cli
