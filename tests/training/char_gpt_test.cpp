// applications::CharGPT, the character model of `lockstep train --model gpt`: its logits at a
// position do not depend on later characters (causal), it trains on next-character targets
// through fit, and it saves and loads (the causal mask with it) predicting the same.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

std::unique_ptr<Functional> tiny_gpt() {
  set_random_seed(3);
  return applications::CharGPT({.vocabulary_size = 7, .sequence_length = 6, .dim = 8, .num_heads = 2, .depth = 2});
}

Tensor ids(const std::vector<std::int32_t>& v) {
  return Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size()) / 6, 6});
}

TEST(CharGPT, LogitsAtAPositionIgnoreLaterCharacters) {
  const auto model = tiny_gpt();
  EXPECT_EQ(model->output_shape(), (Shape{-1, 6, 7}));
  // Two rows equal up to position 2, different after it.
  const auto out = model->predict(ids({1, 2, 3, 4, 5, 6, 1, 2, 3, 0, 0, 1}), {.batch_size = 2}).to_vector<float>();
  for (std::size_t pos = 0; pos < 6; ++pos) {
    double diff = 0;
    for (std::size_t c = 0; c < 7; ++c) diff = std::max(diff, double(std::abs(out[pos * 7 + c] - out[42 + pos * 7 + c])));
    if (pos <= 2) EXPECT_EQ(diff, 0.0) << "position " << pos << " sees a later character";
    else EXPECT_GT(diff, 1e-4) << "position " << pos << " does not see its own character";
  }
}

TEST(CharGPT, LearnsNextCharactersAndRoundTripsThroughASavedModel) {
  auto model = tiny_gpt();
  model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  // A cycle 0 1 2 3 4 5 6 0 1 ...: each next character is determined by the current one.
  std::vector<std::int32_t> x, y;
  for (std::int32_t row = 0; row < 64; ++row)
    for (std::int32_t i = 0; i < 6; ++i) {
      x.push_back((row + i) % 7);
      y.push_back((row + i + 1) % 7);
    }
  const Tensor xs = ids(x), ys = ids(y);
  const History h = model->fit(data::Dataset::from_tensor_slices(xs, ys).shuffle(64, 1).batch(16), {.epochs = 30, .verbose = 0});
  EXPECT_LT(h.history.at("loss").back(), 0.1);
  EXPECT_EQ(h.history.at("accuracy").back(), 1.0);
  const auto dir = std::filesystem::temp_directory_path() / "lockstep_char_gpt_test";
  std::filesystem::remove_all(dir);
  save_model(*model, dir.string());
  const auto back = load_model(dir.string());
  EXPECT_EQ(back->predict(xs).to_vector<float>(), model->predict(xs).to_vector<float>());
  std::filesystem::remove_all(dir);
}

TEST(CharGPT, BadOptionsAreNamed) {
  EXPECT_THROW(applications::CharGPT({.vocabulary_size = 1}), ValueError);
  EXPECT_THROW(applications::CharGPT({.vocabulary_size = 5, .dim = 10, .num_heads = 4}), ValueError);
}

}  // namespace
}  // namespace lockstep
