#pragma once
// The character model's text: `lockstep train --model gpt --text FILE` reads it into windows, its
// vocabulary is saved with the model (vocabulary.json in the model's folder), and
// `lockstep generate` samples characters from the saved model.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "commands.hpp"
#include "targets.hpp"
#include "lockstep/data/text.hpp"
#include "lockstep/datasets/split.hpp"

namespace lockstep::cli {

/// Where --text's default comes from: Debian's base-files licences, always installed.
inline constexpr const char* kDefaultTextDir = "/usr/share/common-licenses";

/// --text's files, or every file of kDefaultTextDir once (a link to a file already read is
/// skipped), in name order.
std::vector<std::string> text_paths(const std::string& text_flag);

/// The text of --text cut into windows of --sequence-length (the last 10% for validation).
data::CharText load_text(const TrainArgs& args);

/// The windows as train (training) and test (validation) splits.
datasets::TrainTest text_splits(const data::CharText& text);

/// Next-character targets: sparse_categorical_crossentropy on logits over the vocabulary, accuracy.
TargetPlan text_targets(const data::CharText& text);

/// Writes `vocabulary` beside the model saved at `model_path` (vocabulary_path).
void save_vocabulary(const std::string& model_path, const data::CharVocabulary& vocabulary);
/// <folder>/vocabulary.json for a saved-model folder, FILE.vocabulary.json for FILE.keras.
std::string vocabulary_path(const std::string& model_path);

struct GenerateArgs {
  std::string model;         // a run directory, a saved-model folder or FILE.keras
  std::string prompt;        // empty: a newline
  std::int64_t length = 200;
  double temperature = 1.0;  // 0: the most likely character each time
  std::optional<std::uint64_t> seed;
};
void add_generate_command(CLI::App& app, GenerateArgs& args);
int run_generate(const GenerateArgs& args);

}  // namespace lockstep::cli
