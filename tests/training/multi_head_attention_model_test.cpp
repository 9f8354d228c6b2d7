// MultiHeadAttention inside a Functional model (self-attention, mha(x, x)): it trains through
// fit and saves and loads, bit for bit, in lockstep's folder format and as a Keras 3 .keras
// archive laid out as Keras writes it (positional call arguments, weights in sublayer groups).
// It takes its inputs' Keras masks (Embedding's mask_zero) as Keras 3 does, and passes on the
// query's.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/layers/layer_normalization.hpp"
#include "lockstep/layers/multi_head_attention.hpp"
#include "lockstep/layers/sequence_layers.hpp"
#include "training/layer_in_model_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::labels;
using test::same_bits;

Tensor sequences(std::int64_t n) { return test::inputs(n, 5 * 8).reshape({n, 5, 8}); }

std::unique_ptr<Functional> attention_model() {
  const KerasTensor in = Input({5, 8});
  return test::three_class_model(
      in, call(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .dropout = 0.1f}), {in, in}), "attention");
}

TEST(MultiHeadAttentionModel, TrainsThroughFit) {
  auto model = attention_model();
  const auto history = model->fit(sequences(48), labels(48, 3), {.epochs = 6, .batch_size = 8, .verbose = 0});
  const auto& loss = history.history.at("loss");
  EXPECT_LT(loss.back(), loss.front());
  EXPECT_EQ(model->layers()[1]->variables()[0].name(), "multi_head_attention/query/kernel");
}

TEST(MultiHeadAttentionModel, SavesAndLoadsInBothFormats) {
  auto model = attention_model();
  model->fit(sequences(16), labels(16, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
  test::expect_round_trip_in_both_formats(*model, test::fresh_test_dir("multi_head_attention", "both_formats"),
                                          sequences(5));
}

TEST(MultiHeadAttentionModel, KerasArchiveIsLaidOutAsKerasWritesIt) {
  auto model = attention_model();
  const std::string path = test::fresh_test_dir("multi_head_attention", "layout") + ".keras";
  std::filesystem::remove(path);
  save_model(*model, path);
  const auto entries = io::decode_zip(io::read_file(path), path);
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  const json& mha = config["config"]["layers"][1];
  EXPECT_EQ(mha["class_name"], "MultiHeadAttention");
  EXPECT_EQ(mha["config"]["num_heads"], 2);
  EXPECT_EQ(mha["config"]["key_dim"], 4);
  EXPECT_EQ(mha["config"]["kernel_initializer"]["class_name"], "GlorotUniform");
  // mha(x, x): two positional tensors, not one list.
  const json& args = mha["inbound_nodes"][0]["args"];
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0]["class_name"], "__keras_tensor__");
  EXPECT_EQ(mha["build_config"]["shapes_dict"]["query_shape"], json::array({nullptr, 5, 8}));

  const io::H5Content h5 = io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, "h5", {});
  const auto vars = model->layers()[1]->variables();
  const char* paths[] = {"query_dense/vars/0",  "query_dense/vars/1", "key_dense/vars/0",
                         "key_dense/vars/1",    "value_dense/vars/0", "value_dense/vars/1",
                         "output_dense/vars/0", "output_dense/vars/1"};
  for (std::size_t i = 0; i < 8; ++i) {
    const Tensor* t = h5.find_dataset(std::string("layers/multi_head_attention/") + paths[i]);
    ASSERT_NE(t, nullptr) << paths[i];
    EXPECT_TRUE(same_bits(*t, vars[i].read_value())) << vars[i].name();
  }
}

// ---- Keras masks ----

using layers::MultiHeadAttentionLayer;

const MultiHeadAttentionLayer& as_mha(const layers::LayerPtr& l) {
  return dynamic_cast<const MultiHeadAttentionLayer&>(*l);
}

// Token rows (0 pads): rows x steps.
Tensor tokens(const std::vector<float>& v, std::int64_t steps) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size()) / steps, steps});
}

// Keras' attention mask from the masks of query and value tokens, by hand:
// [b, t, s] = query[b, t] != 0 && value[b, s] != 0 (and s <= t when causal).
Tensor outer_mask(const Tensor& query, const Tensor& value, bool causal = false) {
  const auto q = query.to_vector<float>(), v = value.to_vector<float>();
  const std::int64_t b = query.dim(0), t = query.dim(1), s = value.dim(1);
  std::vector<std::uint8_t> m(static_cast<std::size_t>(b * t * s));
  for (std::int64_t e = 0; e < b; ++e)
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = 0; j < s; ++j)
        m[static_cast<std::size_t>((e * t + i) * s + j)] =
            q[static_cast<std::size_t>(e * t + i)] != 0 && v[static_cast<std::size_t>(e * s + j)] != 0 &&
            (!causal || j <= i);
  return Tensor::from_vector(m, {b, t, s});
}

void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5f * (1 + std::fabs(w[i]))) << what << " " << i;
}

const Tensor kSelfTokens = tokens({3, 1, 4, 0, 0,  //
                                   2, 6, 5, 1, 3,  //
                                   5, 0, 0, 0, 0,  //
                                   0, 2, 0, 6, 1},
                                  5);

// Embedding(mask_zero) -> mha(x, x): the padding steps neither attend nor are attended to, as the
// explicit attention_mask query_mask[:, :, None] & value_mask[:, None, :] does (Keras'
// _compute_attention_mask); a padded query step attends to every step alike.
TEST(MultiHeadAttentionModel, SelfAttentionTakesTheEmbeddingsMask) {
  const KerasTensor in = Input({5});
  const auto emb = layers::Embedding(7, 8, /*mask_zero=*/true);
  const auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4});
  const KerasTensor e = call(emb, in);
  Functional model(in, call(mha, {e, e}), "masked_self_attention", 3);
  const Tensor x = emb->call(kSelfTokens, {});
  const Tensor want = as_mha(mha).attend(x, x, Tensor(), {}, {.attention_mask = outer_mask(kSelfTokens, kSelfTokens)});
  const Tensor got = model.predict(kSelfTokens);
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  EXPECT_NE(got.to_vector<float>(), as_mha(mha).merge({x, x}, {}).to_vector<float>());
}

// With use_causal_mask the causal mask and the padding masks both apply.
TEST(MultiHeadAttentionModel, CausalMaskAndPaddingMasksBothApply) {
  const KerasTensor in = Input({5});
  const auto emb = layers::Embedding(7, 8, /*mask_zero=*/true);
  const auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4});
  const KerasTensor e = call(emb, in);
  Functional model(in, call(mha, {e, e}, {.use_causal_mask = true}), "masked_causal_attention", 3);
  const Tensor x = emb->call(kSelfTokens, {});
  const auto& m = as_mha(mha);
  const Tensor got = model.predict(kSelfTokens);
  expect_close(got, m.attend(x, x, Tensor(), {}, {.attention_mask = outer_mask(kSelfTokens, kSelfTokens, true)}),
               "causal and padding");
  EXPECT_NE(got.to_vector<float>(),
            m.attend(x, x, Tensor(), {}, {.attention_mask = outer_mask(kSelfTokens, kSelfTokens)}).to_vector<float>());
  EXPECT_NE(got.to_vector<float>(), m.attend(x, x, Tensor(), {}, {.use_causal_mask = true}).to_vector<float>());
}

// Cross-attention, 3 query steps over 5 value steps, each input masked: the attention mask is
// [batch, 3, 5], and the output keeps the query's mask, so GlobalAveragePooling1D after it
// averages the query's kept steps only.
TEST(MultiHeadAttentionModel, CrossAttentionTakesBothMasksAndPassesOnTheQuerys) {
  const Tensor qt = tokens({3, 1, 0, 2, 0, 0, 4, 4, 4}, 3);
  const Tensor vt = tokens({1, 2, 0, 0, 0, 6, 5, 4, 3, 0, 2, 0, 2, 0, 2}, 5);
  const KerasTensor qi = Input({3}, "queries"), vi = Input({5}, "values");
  const auto qe = layers::Embedding(7, 8, true), ve = layers::Embedding(7, 8, true);
  const auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .output_shape = 6});
  const KerasTensor y = call(mha, {call(qe, qi), call(ve, vi)});
  Functional model({qi, vi}, call(layers::GlobalAveragePooling1D(), y), "masked_cross_attention", 3);
  const Tensor got = model.predict({qt, vt})[0];
  ASSERT_EQ(got.shape(), (Shape{3, 6}));

  const Tensor att = as_mha(mha).attend(qe->call(qt, {}), ve->call(vt, {}), Tensor(), {},
                                        {.attention_mask = outer_mask(qt, vt)});
  const auto a = att.to_vector<float>(), q = qt.to_vector<float>();
  std::vector<float> masked_mean(3 * 6, 0.0f), plain_mean(3 * 6, 0.0f);
  for (std::size_t e = 0; e < 3; ++e) {
    float kept = 0;
    for (std::size_t i = 0; i < 3; ++i) kept += q[e * 3 + i] != 0 ? 1.0f : 0.0f;
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t f = 0; f < 6; ++f) {
        const float v = a[(e * 3 + i) * 6 + f];
        if (q[e * 3 + i] != 0) masked_mean[e * 6 + f] += v / kept;
        plain_mean[e * 6 + f] += v / 3;
      }
  }
  expect_close(got, Tensor::from_vector(masked_mean, {3, 6}), "masked mean");
  EXPECT_NE(got.to_vector<float>(), plain_mean);
}

// Embedding(mask_zero) -> mha(x, x) -> Add (residual) -> LayerNormalization ->
// GlobalAveragePooling1D -> Dense(3, softmax), `steps` long.
std::unique_ptr<Functional> masked_classifier(std::int64_t steps) {
  const KerasTensor in = Input({steps});
  const KerasTensor e = call(layers::Embedding(9, 8, true), in);
  const KerasTensor a = call(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4}), {e, e});
  const KerasTensor n = call(layers::LayerNormalization(), call(layers::Add(), {e, a}));
  const KerasTensor out = call(layers::Dense(3, "softmax"), call(layers::GlobalAveragePooling1D(), n));
  auto m = std::make_unique<Functional>(in, out, "masked_classifier", 7);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// Sequences of 1 to 6 tokens padded to 6; the class is the first token's, mod 3.
std::pair<Tensor, Tensor> padded_data(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n * 6), 0.0f);
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t len = 1 + (r * 7) % 6;
    for (std::int64_t i = 0; i < len; ++i) x[static_cast<std::size_t>(r * 6 + i)] = static_cast<float>(1 + (r * 5 + i * 3) % 8);
    y[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(x[static_cast<std::size_t>(r * 6)]) % 3;
  }
  return {Tensor::from_vector(x, {n, 6}), Tensor::from_vector(y, {n})};
}

// A masked model trains (the gradients flow through the masked attention), 2 replicas train what
// one device does, and the trained model predicts for a padded sequence what the same weights
// predict for the sequence unpadded: the masks reach the attention, the residual Add, the
// LayerNormalization and the average.
TEST(MultiHeadAttentionModel, MaskedModelTrainsOnReplicasAndIgnoresPadding) {
  const auto [x, y] = padded_data(48);
  std::vector<std::vector<float>> weights[2];
  std::vector<double> losses[2];
  const Tensor padded = tokens({3, 1, 4, 0, 0, 0, 2, 7, 0, 0, 0, 0}, 6), unpadded = tokens({3, 1, 4, 2, 7, 0}, 3);
  for (int replicas : {1, 2}) {
    distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
    auto scope = strategy.scope();
    auto model = masked_classifier(6);
    losses[replicas - 1] =
        model->fit(x, y, {.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0}).history.at("loss");
    strategy.check_mirrored(model->variables());
    for (const auto& v : model->variables()) weights[replicas - 1].push_back(v.value().to_vector<float>());
    auto short_model = masked_classifier(3);
    ASSERT_EQ(short_model->variables().size(), model->variables().size());
    for (std::size_t i = 0; i < model->variables().size(); ++i)
      short_model->variables()[i].assign(model->variables()[i].value());
    expect_close(model->predict(padded), short_model->predict(unpadded), "padded vs unpadded");
  }
  for (double l : losses[0]) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses[0].back(), losses[0].front());
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (std::size_t i = 0; i < weights[0].size(); ++i)
    for (std::size_t j = 0; j < weights[0][i].size(); ++j) ASSERT_NEAR(weights[0][i][j], weights[1][i][j], 1e-4) << i;
  for (std::size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[0][i], losses[1][i], 1e-4) << i;
}

}  // namespace
}  // namespace lockstep
