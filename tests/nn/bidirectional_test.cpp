// Bidirectional (Keras 3's wrapper, keras/src/layers/rnn/bidirectional.py): its output is the
// forward layer's merged with the backward layer's put back in time order, computed here from
// plain layers given the wrapper's weights; masks (a padded batch gives each sequence's own
// result, masked steps are zeros with return_sequences); configs, weight order and Keras' weight
// paths; the arguments Keras refuses, by name.
#include "lockstep/layers/bidirectional.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "common/error_message.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using layers::BidirectionalLayer;
using layers::RecurrentOptions;
using nlohmann::json;

namespace {
constexpr std::int64_t kB = 3, kT = 5, kF = 2, kU = 3;

std::vector<float> random_values(std::int64_t n, std::uint64_t seed, float scale = 0.6f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

layers::LayerPtr make(const std::string& cls, bool return_sequences, bool go_backwards = false) {
  const RecurrentOptions o{.units = kU, .return_sequences = return_sequences, .go_backwards = go_backwards};
  if (cls == "LSTM") return layers::LSTM(o);
  if (cls == "GRU") return layers::GRU(o);
  return layers::SimpleRNN(o);
}

std::shared_ptr<BidirectionalLayer> built(const layers::LayerPtr& inner, const std::string& mode) {
  auto b = std::make_shared<BidirectionalLayer>(inner, mode);
  b->build(Shape{-1, -1, kF}, 7);
  std::uint64_t seed = 11;
  for (const auto& v : b->variables())
    v.assign(Tensor::from_vector(random_values(v.shape().numel(), seed++), v.shape()));
  return b;
}

// A plain layer of `cls` (go_backwards as given) holding the wrapper's weights from `first` on.
layers::LayerPtr plain_copy(const BidirectionalLayer& b, const std::string& cls, bool return_sequences,
                            bool go_backwards, std::size_t first) {
  auto l = make(cls, return_sequences, go_backwards);
  l->build(Shape{-1, -1, kF}, 1);
  for (std::size_t i = 0; i < l->variables().size(); ++i)
    l->variables()[i].assign(b.variables()[first + i].read_value());
  return l;
}
}  // namespace

TEST(Bidirectional, OutputIsTheForwardAndTheReversedBackwardOutputsMerged) {
  const Tensor x = Tensor::from_vector(random_values(kB * kT * kF, 3, 1.0f), {kB, kT, kF});
  for (const std::string cls : {"SimpleRNN", "LSTM", "GRU"})
    for (const bool seq : {false, true})
      for (const std::string mode : {"concat", "sum", "mul", "ave"}) {
        const std::string what = cls + (seq ? " return_sequences " : " ") + mode;
        const auto b = built(make(cls, seq), mode);
        const std::size_t half = b->variables().size() / 2;
        const auto y = plain_copy(*b, cls, seq, false, 0)->call(x, {}).to_vector<float>();
        const auto yb = plain_copy(*b, cls, seq, true, half)->call(x, {}).to_vector<float>();
        // The backward layer's outputs in time order (Keras' ops.flip(y_rev, axis=1)).
        std::vector<float> rev = yb;
        const std::int64_t steps = seq ? kT : 1;
        for (std::int64_t n = 0; n < kB; ++n)
          for (std::int64_t t = 0; t < steps; ++t)
            for (std::int64_t j = 0; j < kU; ++j)
              rev[static_cast<std::size_t>((n * steps + t) * kU + j)] =
                  yb[static_cast<std::size_t>((n * steps + steps - 1 - t) * kU + j)];
        const Tensor got = b->call(x, {});
        const std::int64_t width = mode == "concat" ? 2 * kU : kU;
        EXPECT_EQ(got.shape(), seq ? Shape({kB, kT, width}) : Shape({kB, width})) << what;
        EXPECT_EQ(b->compute_output_shape(Shape{-1, kT, kF}),
                  seq ? Shape({-1, kT, width}) : Shape({-1, width}))
            << what;
        const auto g = got.to_vector<float>();
        for (std::int64_t r = 0; r < kB * steps; ++r)
          for (std::int64_t j = 0; j < kU; ++j) {
            const float f = y[static_cast<std::size_t>(r * kU + j)],
                        k = rev[static_cast<std::size_t>(r * kU + j)];
            if (mode == "concat") {
              EXPECT_NEAR(g[static_cast<std::size_t>(r * 2 * kU + j)], f, 1e-6) << what;
              EXPECT_NEAR(g[static_cast<std::size_t>(r * 2 * kU + kU + j)], k, 1e-6) << what;
            } else {
              const float want = mode == "sum" ? f + k : mode == "mul" ? f * k : (f + k) / 2;
              EXPECT_NEAR(g[static_cast<std::size_t>(r * kU + j)], want, 1e-6) << what;
            }
          }
      }
}

// Behind Embedding(mask_zero=True), a padded batch gives each sequence's own result; with
// return_sequences the padded steps are zeros (Keras forces zero_output_for_mask) and the output
// keeps the input's mask, without it the output has no mask.
TEST(Bidirectional, APaddedBatchGivesWhatEachUnpaddedSequenceGives) {
  for (const std::string cls : {"LSTM", "GRU"})
    for (const bool seq : {false, true}) {
      auto emb = layers::Embedding(9, kF, true);
      emb->build(Shape{-1, -1}, 3);
      const auto b = built(make(cls, seq), "concat");
      const std::vector<std::vector<float>> rows = {{3, 1, 4}, {1, 5, 8, 2, 6}, {7}};
      std::vector<float> padded;
      for (const auto& r : rows) {
        padded.insert(padded.end(), r.begin(), r.end());
        padded.insert(padded.end(), static_cast<std::size_t>(kT) - r.size(), 0.0f);
      }
      const Tensor ids = Tensor::from_vector(padded, {kB, kT});
      const Tensor mask = emb->compute_mask(ids, Tensor());
      const auto got = b->call_masked(emb->call(ids, {}), mask, {}).to_vector<float>();
      const Tensor out_mask = b->compute_mask(Tensor(), mask);
      EXPECT_EQ(out_mask.defined(), seq) << cls;
      if (seq) {
        EXPECT_EQ(out_mask.to_vector<std::uint8_t>(), mask.to_vector<std::uint8_t>()) << cls;
      }
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const auto n = static_cast<std::int64_t>(rows[r].size());
        const auto alone =
            b->call(emb->call(Tensor::from_vector(rows[r], {1, n}), {}), {}).to_vector<float>();
        const std::size_t width = 2 * kU, per_row = seq ? kT * width : width;
        for (std::size_t j = 0; j < per_row; ++j) {
          const float want = j < alone.size() ? alone[j] : 0.0f;  // padded steps: zeros
          EXPECT_NEAR(got[r * per_row + j], want, 1e-6) << cls << " row " << r << " [" << j << "]";
        }
      }
    }
}

TEST(Bidirectional, HoldsBothLayersWeightsInKerasOrderAndPaths) {
  RecurrentOptions o{.units = kU, .return_sequences = true};
  o.name = "enc";
  auto b = std::make_shared<BidirectionalLayer>(layers::LSTM(o), "sum");
  EXPECT_EQ(b->forward_layer().name(), "forward_enc");
  EXPECT_EQ(b->backward_layer().name(), "backward_enc");
  EXPECT_FALSE(b->forward_layer().options().go_backwards);
  EXPECT_TRUE(b->backward_layer().options().go_backwards);
  EXPECT_TRUE(b->forward_layer().options().zero_output_for_mask);
  b->build(Shape{-1, kT, kF}, 1);
  ASSERT_EQ(b->variables().size(), 6u);
  EXPECT_EQ(b->count_params(), 2 * (kF * 4 * kU + kU * 4 * kU + 4 * kU));
  EXPECT_EQ(b->variables()[0].shape(), Shape({kF, 4 * kU}));
  EXPECT_EQ(b->variables()[4].shape(), Shape({kU, 4 * kU}));
  EXPECT_EQ(b->keras_weight_path(0), "forward_layer/cell/vars/0");
  EXPECT_EQ(b->keras_weight_path(2), "forward_layer/cell/vars/2");
  EXPECT_EQ(b->keras_weight_path(3), "backward_layer/cell/vars/0");
  EXPECT_EQ(b->keras_weight_path(5), "backward_layer/cell/vars/2");
  // One copy of each weight: the wrapper's variables are the ones the inner layers compute with.
  EXPECT_EQ(b->variables()[0].identity(), b->forward_layer().kernel().identity());
  EXPECT_EQ(b->variables()[4].identity(), b->backward_layer().recurrent_kernel().identity());
  // The two layers start with different weights (their own seeds), as Keras' do.
  EXPECT_NE(b->variables()[0].read_value().to_vector<float>(),
            b->variables()[3].read_value().to_vector<float>());
  b->set_trainable(false);
  EXPECT_TRUE(b->trainable_variables().empty());
}

TEST(Bidirectional, ConfigsRoundTripWithKerasKeys) {
  const auto b = std::make_shared<BidirectionalLayer>(layers::GRU(4, true), "mul", nullptr, "bi");
  const json c = b->get_config();
  EXPECT_EQ(c.at("merge_mode"), "mul");
  EXPECT_EQ(c.at("layer").at("class_name"), "GRU");
  EXPECT_EQ(c.at("layer").at("config").at("name"), "forward_gru");
  EXPECT_EQ(c.at("backward_layer").at("config").at("go_backwards"), true);
  const auto again = layers::find_layer_class("Bidirectional")->from_config(c);
  EXPECT_EQ(again->get_config(), c);
  EXPECT_EQ(again->name(), "bi");
}

TEST(Bidirectional, RefusesWhatKerasRefusesByName) {
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM(3), "max"), "merge_mode 'max'");
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM({.units = 3, .return_state = true}), std::nullopt),
                     "return_state=True");
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::Dense(3)), "must be a recurrent layer");
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM(3), "concat", layers::Dense(3)),
                     "backward_layer");
  // A given backward layer must run the other way and agree in return_sequences.
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM(3), "concat", layers::LSTM(3)), "go_backwards");
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM({.units = 3, .go_backwards = true})),
                     "go_backwards");
  RecurrentOptions back{.units = 3, .return_sequences = true, .go_backwards = true};
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM(3), "concat", layers::LSTM(back)),
                     "return_sequences");
  back.return_sequences = false;
  back.units = 4;
  EXPECT_VALUE_ERROR((void)layers::Bidirectional(layers::LSTM(3), "concat", layers::LSTM(back)), "units");
  back.units = 3;
  back.activation = "relu";
  back.name = "mine";
  const auto b = std::make_shared<BidirectionalLayer>(layers::LSTM(3), "concat", layers::LSTM(back));
  EXPECT_EQ(b->backward_layer().name(), "mine");
  EXPECT_EQ(b->backward_layer().get_config().at("activation"), "relu");
}

TEST(Bidirectional, MergeModeNoneRoundTripsAsNullAndGivesEachOutputsShape) {
  // Keras' merge_mode=None: two outputs (lockstep::call_outputs), each the forward layer's shape.
  const auto b = layers::find_layer_class("Bidirectional")
                     ->from_config({{"name", "b"},
                                    {"merge_mode", nullptr},
                                    {"layer", {{"class_name", "LSTM"}, {"config", layers::LSTM(3, true)->get_config()}}}});
  const auto& bi = dynamic_cast<const BidirectionalLayer&>(*b);
  EXPECT_FALSE(bi.merge_mode().has_value());
  EXPECT_TRUE(b->get_config().at("merge_mode").is_null());
  EXPECT_EQ(b->compute_output_shape(Shape{-1, 5, 2}), (Shape{-1, 5, 3}));
}
