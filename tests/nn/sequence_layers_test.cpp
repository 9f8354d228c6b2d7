// Embedding, GlobalAveragePooling1D, RepeatVector, Permute, Softmax, Dense on rank 3 and the
// gelu / silu activations: forward values computed by hand and the errors a user meets.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using test::message_of;

#define EXPECT_MESSAGE(stmt, text) EXPECT_NE(message_of([&] { (void)(stmt); }).find(text), std::string::npos) << message_of([&] { (void)(stmt); })

namespace {
Tensor iota(const Shape& s) {
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector(v, s);
}
void expect_near(const Tensor& t, const std::vector<float>& want, float tol = 1e-6f) {
  const auto got = t.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}
}  // namespace

TEST(Activations, GeluBothFormsAndSiluMatchTheirFormulas) {
  const Tensor x = Tensor::from_vector(std::vector<float>{-2, -0.5f, 0, 1, 3}, {5});
  std::vector<float> exact, approx, swish;
  for (float v : x.to_vector<float>()) {
    exact.push_back(static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))));
    approx.push_back(static_cast<float>(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))));
    swish.push_back(static_cast<float>(v / (1 + std::exp(-static_cast<double>(v)))));
  }
  expect_near(gelu(x), exact);
  expect_near(gelu(x, true), approx);
  expect_near(silu(x), swish);
  // The two gelu forms differ (by about 2e-4 at 1): the flag is not ignored.
  EXPECT_GT(std::fabs(gelu(x).to_vector<float>()[3] - gelu(x, true).to_vector<float>()[3]), 1e-4f);
  // As activation names, "swish" is silu's alias (saved as "silu", Keras' name).
  EXPECT_EQ(layers::activation_name(layers::parse_activation("swish")), "silu");
  expect_near(layers::Activation("silu")->call(x, {}), swish);
}

TEST(Embedding, LooksUpRowsOfItsTableForIntegerOrFloatIndices) {
  auto emb = layers::Embedding(4, 2);
  emb->set_name("embedding");
  emb->build(Shape{-1, 3}, 1);
  const auto& e = dynamic_cast<const layers::EmbeddingLayer&>(*emb);
  EXPECT_EQ(e.embeddings().name(), "embedding/embeddings");
  EXPECT_EQ(emb->compute_output_shape(Shape{-1, 3}), (Shape{-1, 3, 2}));
  for (float v : e.embeddings().value().to_vector<float>()) EXPECT_LE(std::fabs(v), 0.05f);  // Keras' "uniform"
  e.embeddings().assign(iota({4, 2}));
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{3, 0, 3, 1, 2, 0}, {2, 3});
  const Tensor y = emb->call(idx, {});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  expect_near(y, {6, 7, 0, 1, 6, 7, 2, 3, 4, 5, 0, 1});
  expect_near(emb->call(idx.to(DType::kF32), {}), y.to_vector<float>());
}

TEST(Embedding, AnIndexOutsideTheVocabularyIsAnErrorNamingIt) {
  auto emb = layers::Embedding(4, 2);
  emb->set_name("emb");
  emb->build(Shape{-1, 2}, 1);
  EXPECT_MESSAGE(emb->call(Tensor::from_vector(std::vector<float>{1, 4}, {1, 2}), {}),
                 "layer 'emb' (Embedding, input_dim 4): an index is outside the vocabulary");
  EXPECT_MESSAGE(emb->call(Tensor::from_vector(std::vector<float>{1, 4}, {1, 2}), {}), "4 at index 1");
  EXPECT_MESSAGE(emb->call(Tensor::from_vector(std::vector<float>{-1, 0}, {1, 2}), {}), "-1 at index 0");
  // Integer ids go to the gather as they are (checked before its cast): on the CPU at once too.
  EXPECT_MESSAGE(emb->call(Tensor::from_vector(std::vector<std::int32_t>{1, 4}, {1, 2}), {}),
                 "(Embedding, input_dim 4): an index is outside the vocabulary: gather_rows: label 4 at index 1");
  EXPECT_MESSAGE(layers::Embedding(0, 2), "input_dim and output_dim must be positive");
  EXPECT_MESSAGE(layers::Embedding({.input_dim = 3, .output_dim = 2, .embeddings_initializer = "bogus"}),
                 "unknown initializer 'bogus'");
}

TEST(GlobalAveragePooling1D, AveragesOverTheSteps) {
  const Tensor x = iota({2, 3, 2});
  expect_near(layers::GlobalAveragePooling1D()->call(x, {}), {2, 3, 8, 9});
  EXPECT_EQ(layers::GlobalAveragePooling1D(true)->call(x, {}).shape(), (Shape{2, 1, 2}));
  EXPECT_MESSAGE(layers::GlobalAveragePooling1D()->compute_output_shape(Shape{-1, 4}),
                 "(GlobalAveragePooling1D) needs inputs of shape (batch, steps, features), got (None, 4)");
}

TEST(RepeatVector, RepeatsEachExample) {
  const Tensor y = layers::RepeatVector(2)->call(iota({2, 3}), {});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  expect_near(y, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  EXPECT_MESSAGE(layers::RepeatVector(0), "RepeatVector: n must be positive, got 0");
  EXPECT_MESSAGE(layers::RepeatVector(2)->compute_output_shape(Shape{-1, 2, 3}), "needs inputs of shape (batch, features)");
}

TEST(Permute, PermutesTheAxesAfterTheBatchOneBased) {
  const Tensor y = layers::Permute({2, 1})->call(iota({1, 2, 3}), {});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 2}));
  expect_near(y, {0, 3, 1, 4, 2, 5});
  const Tensor z = layers::Permute({3, 1, 2})->call(iota({1, 2, 2, 2}), {});  // z[b, k, i, j] = x[b, i, j, k]
  expect_near(z, {0, 2, 4, 6, 1, 3, 5, 7});
  EXPECT_MESSAGE(layers::Permute({0, 1}), "Permute: dims (0, 1) must be a permutation of 1..2");
  EXPECT_MESSAGE(layers::Permute({2, 1})->compute_output_shape(Shape{-1, 4}), "permutes 2 axes after the batch");
}

TEST(Softmax, OverTheLastOrAnotherAxis) {
  const Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 4}, {1, 2, 2});
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  expect_near(layers::Softmax()->call(x, {}), {static_cast<float>(1 / (1 + e)), static_cast<float>(e / (1 + e)),
                                               static_cast<float>(1 / (1 + e2)), static_cast<float>(e2 / (1 + e2))});
  // axis 1: over (0, 2) and (1, 4).
  const double e3 = std::exp(3.0);
  expect_near(layers::Softmax(1)->call(x, {}), {static_cast<float>(1 / (1 + e2)), static_cast<float>(1 / (1 + e3)),
                                                static_cast<float>(e2 / (1 + e2)), static_cast<float>(e3 / (1 + e3))});
  EXPECT_MESSAGE(layers::Softmax(0)->compute_output_shape(Shape{-1, 3}), "axis 0 is not an axis after the batch");
}

TEST(Dense, AppliesToTheLastAxisOfAnyRank) {
  auto dense = layers::Dense({.units = 2, .use_bias = false});
  dense->build(Shape{-1, 2, 3}, 1);
  EXPECT_EQ(dense->compute_output_shape(Shape{-1, 2, 3}), (Shape{-1, 2, 2}));
  EXPECT_EQ(dense->variables()[0].shape(), (Shape{3, 2}));
  dense->variables()[0].assign(Tensor::from_vector(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2}));
  // Each [x0, x1, x2] -> [x0 + x2, x1 + x2].
  expect_near(dense->call(iota({2, 2, 3}), {}), {2, 3, 8, 9, 14, 15, 20, 21});
  EXPECT_MESSAGE(dense->call(iota({2, 2, 4}), {}), "was built for inputs (None, 2, 3) but receives (2, 2, 4)");
}

// Embedding(mask_zero) makes a mask that Dense carries and GlobalAveragePooling1D averages the
// kept steps with, in a Sequential and in a Functional model (Keras' mask propagation).
TEST(Masking, PaddingStepsAreLeftOutOfTheAverageInBothModelKinds) {
  auto make_layers = [] {
    auto emb = layers::Embedding(5, 2, /*mask_zero=*/true);
    auto dense = layers::Dense({.units = 2, .use_bias = false});
    return std::vector<layers::LayerPtr>{emb, dense, layers::GlobalAveragePooling1D()};
  };
  auto set_weights = [](const std::vector<Variable>& vars) {
    vars[0].assign(iota({5, 2}));                                                           // row i: (2i, 2i + 1)
    vars[1].assign(Tensor::from_vector(std::vector<float>{1, 0, 0, 1}, {2, 2}));          // identity
  };
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 0, 0, 4, 0, 3, 0}, {2, 4});
  // Row 0 keeps steps 1, 2: mean of (2, 3) and (4, 5); row 1 keeps 4, 3: mean of (8, 9) and (6, 7).
  const std::vector<float> want{3, 4, 7, 8};

  std::vector<layers::LayerPtr> seq_layers{layers::Input(Shape{4})};
  for (auto& l : make_layers()) seq_layers.push_back(l);
  Sequential seq(seq_layers);
  set_weights(seq.variables());
  expect_near(seq.predict(x), want);

  const auto ls = make_layers();
  const KerasTensor in = Input({4});
  Functional fun(in, call(ls[2], call(ls[1], call(ls[0], in))));
  set_weights(fun.variables());
  expect_near(fun.predict(x), want);

  // Merge layers combine masks as Keras': Add keeps the steps both inputs keep; Concatenate along
  // the steps joins the masks.
  {
    const auto ms = make_layers();
    const KerasTensor e = call(ms[0], in);
    const KerasTensor d = call(ms[1], e);
    Functional added(in, call(ms[2], call(layers::Add(), {e, d})));
    set_weights(added.variables());
    expect_near(added.predict(x), {6, 8, 14, 16});  // (emb + emb) averaged over the kept steps
    Functional joined(in, call(layers::GlobalAveragePooling1D(), call(layers::Concatenate(1), {e, d})));
    expect_near(joined.predict(x), want);  // both halves keep the same steps
  }
  // Keras 3's element-wise merge (base_merge.py): the steps any input keeps, and no mask where an
  // input has none (token embeddings plus unmasked position embeddings: every step counts).
  {
    const Tensor m1 = Tensor::from_vector(std::vector<std::uint8_t>{1, 1, 0, 0}, Shape{1, 4});
    const Tensor m2 = Tensor::from_vector(std::vector<std::uint8_t>{0, 1, 1, 0}, Shape{1, 4});
    const Tensor xs = Tensor::zeros(Shape{1, 4, 2});
    const auto add = std::dynamic_pointer_cast<layers::MergeLayer>(layers::Add());
    ASSERT_TRUE(add);
    EXPECT_EQ(cast(add->merge_mask({xs, xs}, {m1, m2}), DType::kU8).to_vector<std::uint8_t>(),
              (std::vector<std::uint8_t>{1, 1, 1, 0}));
    EXPECT_FALSE(add->merge_mask({xs, xs}, {m1, Tensor()}).defined());
    EXPECT_FALSE(add->merge_mask({xs, xs}, {Tensor(), Tensor()}).defined());
  }
  // Without mask_zero there is no mask: every step counts.
  EXPECT_FALSE(layers::Embedding(5, 2)->compute_mask(x, Tensor()).defined());
  EXPECT_TRUE(layers::Embedding(5, 2, true)->compute_mask(x, Tensor()).defined());
}
