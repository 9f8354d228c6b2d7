// PositionEmbedding (keras_hub's): the table's rows broadcast over the batch, the first rows of a
// shorter sequence, its gradient (each row's, summed over the batch), its configuration and the
// inputs it refuses by name.
#include "lockstep/layers/position_embedding.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/layer_registry.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using nlohmann::json;

// A layer of 4 positions x 3 features whose table is 0, 1, ..., 11 (row p: 3p, 3p+1, 3p+2).
std::shared_ptr<layers::PositionEmbeddingLayer> counting_layer(const Shape& input) {
  auto layer = std::make_shared<layers::PositionEmbeddingLayer>(layers::PositionEmbeddingOptions{.sequence_length = 4});
  layer->build(input, 0);
  std::vector<float> table(12);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
  layer->embeddings().assign(Tensor::from_vector(table, {4, 3}));
  return layer;
}

TEST(PositionEmbedding, ReturnsTheTableBroadcastOverTheBatch) {
  auto layer = counting_layer(Shape{-1, 4, 3});
  EXPECT_EQ(layer->count_params(), 12);
  const Tensor x = Tensor::full({2, 4, 3}, 7.0);  // its values are not read
  const Tensor y = layer->call(x, CallContext{});
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  const auto v = y.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<float>(i % 12)) << i;
}

TEST(PositionEmbedding, AShorterSequenceTakesTheFirstRows) {
  auto layer = counting_layer(Shape{-1, 2, 3});
  const auto v = layer->call(Tensor::zeros({3, 2, 3}), CallContext{}).to_vector<float>();
  ASSERT_EQ(v.size(), 18u);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<float>(i % 6)) << i;
}

// d sum(w * layer(x)) / d table = sum over the batch of w, for the rows the sequence reads; 0 for
// the rows past it.
TEST(PositionEmbedding, EachRowsGradientIsTheOutputsGradientSummedOverTheBatch) {
  for (const std::int64_t steps : {4, 3}) {
    auto layer = counting_layer(Shape{-1, steps, 3});
    std::vector<float> w(static_cast<std::size_t>(2 * steps * 3));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 1.0f;
    const Tensor wt = Tensor::from_vector(w, {2, steps, 3});
    std::vector<Tensor> grads;
    {
      GradientTape tape;
      grads = tape.gradient(mul(layer->call(Tensor::zeros({2, steps, 3}), CallContext{}), wt),
                            layer->trainable_variables());
    }
    ASSERT_EQ(grads.size(), 1u);
    ASSERT_EQ(grads[0].shape(), (Shape{4, 3}));
    const auto g = grads[0].to_vector<float>();
    const std::size_t per_example = static_cast<std::size_t>(steps * 3);
    for (std::size_t i = 0; i < 12; ++i) {
      const float expected = i < per_example ? w[i] + w[i + per_example] : 0.0f;
      EXPECT_FLOAT_EQ(g[i], expected) << "steps " << steps << ", element " << i;
    }
  }
}

TEST(PositionEmbedding, ConfigHasKerasHubsNamesAndRoundTrips) {
  auto layer = layers::PositionEmbedding(49);
  layer->set_name("pos");
  const json c = layer->get_config();
  EXPECT_EQ(c, (json{{"name", "pos"}, {"sequence_length", 49}, {"initializer", "glorot_uniform"}}));
  const auto cls = layers::find_layer_class("PositionEmbedding");
  ASSERT_TRUE(cls.has_value());
  EXPECT_EQ(cls->from_config(c)->get_config(), c);
}

TEST(PositionEmbedding, RefusesWhatItCannotTakeByName) {
  EXPECT_NE(test::message_of([] { layers::PositionEmbedding(0); }).find("sequence_length must be positive"),
            std::string::npos);
  EXPECT_NE(test::message_of([] { layers::PositionEmbedding({.sequence_length = 3, .initializer = "bogus"}); })
                .find("bogus"),
            std::string::npos);
  auto layer = layers::PositionEmbedding(4);
  layer->set_name("pos");
  std::string m = test::message_of([&] { layer->build(Shape{-1, 5, 3}, 0); });
  EXPECT_NE(m.find("layer 'pos' (PositionEmbedding, sequence_length 4) receives sequences of 5 steps"),
            std::string::npos)
      << m;
  m = test::message_of([&] { layer->build(Shape{-1, 3}, 0); });
  EXPECT_NE(m.find("needs inputs of shape (batch, steps, features)"), std::string::npos) << m;
  m = test::message_of([&] { layer->call(Tensor::zeros({2, 4, 3}), CallContext{}); });
  EXPECT_NE(m.find("called before it was built"), std::string::npos) << m;
  layer->build(Shape{-1, 4, 3}, 0);
  m = test::message_of([&] { layer->call(Tensor::zeros({2, 4, 5}), CallContext{}); });
  EXPECT_NE(m.find("was built for"), std::string::npos) << m;
}

}  // namespace
}  // namespace lockstep
