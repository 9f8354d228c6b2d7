// A small causal (GPT-style) character model, in C++, trained with MirroredStrategy on every local
// device: next-character prediction on text files (by default seven licences that Debian's
// base-files installs, 137,000 characters), then a greedy continuation of a prompt.
// `lockstep train --model gpt` and `lockstep generate` are the same from the command line.
//   char_gpt [EPOCHS [TEXT_FILE...]]   (default 6 epochs of 61 steps: validation loss ~1.78 nats per
//                                      character against a unigram entropy of 3.19)
#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 6;
  std::vector<std::string> paths(argv + std::min(argc, 2), argv + argc);
  if (paths.empty())
    for (const char* name : {"Apache-2.0", "Artistic", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2.1", "MPL-2.0"})
      paths.push_back(std::string("/usr/share/common-licenses/") + name);

  distribute::MirroredStrategy strategy;
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << "\n";

  // Windows of 64 characters; y is x shifted by one. The last 10% of the text is held out.
  const data::CharText text = data::read_char_text(paths, {.sequence_length = 64});
  std::cout << text.characters << " characters, vocabulary " << text.vocabulary.size() << ", unigram entropy "
            << text.unigram_entropy << " nats per character\n";

  auto scope = strategy.scope();
  const auto model = applications::CharGPT(
      {.vocabulary_size = text.vocabulary.size(), .sequence_length = 64, .dim = 128, .num_heads = 4, .depth = 2});
  std::cout << model->summary();
  model->compile(optimizers::Adam(2e-3), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  auto ds = data::Dataset::from_tensor_slices(text.x_train, text.y_train).shuffle(text.x_train.dim(0)).batch(32);
  const auto validation = data::Dataset::from_tensor_slices(text.x_validation, text.y_validation).batch(256);
  model->fit(ds, {.epochs = epochs, .validation_data = validation});
  const Logs result = model->evaluate(text.x_validation, text.y_validation, {.batch_size = 256});
  std::cout << "Validation loss: " << result.at("loss") << " nats per character (unigram entropy "
            << text.unigram_entropy << ")\n";

  // Greedy continuation of a prompt: the logits at the last filled position pick the next character.
  const std::u32string prompt = U"This License ";
  std::vector<std::int32_t> ids = text.vocabulary.encode(prompt, "the prompt");
  std::vector<std::int64_t> generated;
  for (int i = 0; i < 200; ++i) {
    const std::size_t used = std::min<std::size_t>(ids.size(), 64);
    std::vector<std::int32_t> window(64, 0);
    std::copy(ids.end() - static_cast<std::ptrdiff_t>(used), ids.end(), window.begin());
    const Tensor logits = model->predict(Tensor::from_vector(window, Shape{1, 64}), {.batch_size = 1});
    const auto last = static_cast<std::int64_t>(used);
    const Tensor row = logits.reshape({64, text.vocabulary.size()}).slice(last - 1, last);
    const std::int64_t next = argmax(row, -1).to_vector<std::int64_t>()[0];
    ids.push_back(static_cast<std::int32_t>(next));
    generated.push_back(next);
  }
  std::cout << data::encode_utf8(prompt) << text.vocabulary.decode(generated) << "\n";
  return 0;
} catch (const lockstep::Error& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
