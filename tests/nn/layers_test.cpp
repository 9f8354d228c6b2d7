// Core layers: shapes, parameter counts, Keras initializers, errors, Dropout and Activation.
#include <gtest/gtest.h>

#include "common/error_message.hpp"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/layers/core_layers.hpp"

namespace lockstep {
namespace {

using layers::CallContext;

using test::message_of;

struct Stats {
  double mean = 0, stddev = 0, max_abs = 0;
};
Stats stats_of(const Tensor& t) {
  const auto v = t.to_vector<float>();
  Stats s;
  for (float x : v) {
    s.mean += x;
    s.max_abs = std::max(s.max_abs, static_cast<double>(std::fabs(x)));
  }
  s.mean /= static_cast<double>(v.size());
  for (float x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(s.stddev / static_cast<double>(v.size()));
  return s;
}

TEST(Dense, ShapesAndParamCount) {
  auto d = layers::Dense(128, "relu", 784);
  d->build(Shape{-1, 784}, 1);
  EXPECT_EQ(d->compute_output_shape(Shape{-1, 784}), (Shape{-1, 128}));
  EXPECT_EQ(d->count_params(), 784 * 128 + 128);
  EXPECT_EQ(d->count_params(), 100480);
  auto* dense = dynamic_cast<layers::DenseLayer*>(d.get());
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(dense->kernel().shape(), (Shape{784, 128}));
  EXPECT_EQ(dense->bias().shape(), (Shape{128}));
  ASSERT_EQ(d->trainable_variables().size(), 2u);
  const Tensor y = d->call(Tensor::ones({5, 784}), CallContext{});
  EXPECT_EQ(y.shape(), (Shape{5, 128}));
}

TEST(Dense, ComputesXWPlusBThenActivation) {
  layers::DenseOptions o{.units = 2, .activation = "relu", .kernel_initializer = "ones", .bias_initializer = "ones"};
  auto d = layers::Dense(o);
  d->build(Shape{-1, 3}, 0);
  // x = (1, -2, 0.5): x.W + b = (1 - 2 + 0.5) + 1 = 0.5 per unit; x = (-3, 0, 0): -2 -> relu 0.
  const auto y = d->call(Tensor::from_vector<float>({1, -2, 0.5f, -3, 0, 0}, Shape{2, 3}), CallContext{})
                     .to_vector<float>();
  EXPECT_NEAR(y[0], 0.5f, 1e-6);
  EXPECT_NEAR(y[1], 0.5f, 1e-6);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(Dense, WithoutBias) {
  auto d = layers::Dense(layers::DenseOptions{.units = 128, .use_bias = false, .input_dim = 784});
  d->build(Shape{-1, 784}, 1);
  EXPECT_EQ(d->count_params(), 784 * 128);
  EXPECT_EQ(d->variables().size(), 1u);
}

TEST(Initializers, GlorotUniformBoundsAndMean) {
  auto d = layers::Dense(128, "linear", 784);
  d->build(Shape{-1, 784}, 1234);
  const auto& dense = dynamic_cast<const layers::DenseLayer&>(*d);
  const double limit = std::sqrt(6.0 / (784 + 128));
  const Stats s = stats_of(dense.kernel().value());
  EXPECT_LE(s.max_abs, limit);
  EXPECT_GT(s.max_abs, 0.99 * limit);  // uniform over the whole interval
  EXPECT_LT(std::fabs(s.mean), 0.01 * limit);
  EXPECT_NEAR(s.stddev, limit / std::sqrt(3.0), 0.02 * limit);  // variance of U(-L, L) is L^2 / 3
  // Zeros bias (Keras' default).
  for (float b : dense.bias().value().to_vector<float>()) EXPECT_EQ(b, 0.0f);
}

TEST(Initializers, HeNormalIsTruncatedAtTwoStddev) {
  const std::int64_t fan_in = 400, fan_out = 300;
  const Tensor w = layers::Initializer{"he_normal"}(Shape{fan_in, fan_out}, 99);
  // Keras: stddev = sqrt(2 / fan_in) / .87962566103423978, truncated at 2 stddev; the result
  // then has variance 2 / fan_in.
  const double stddev = std::sqrt(2.0 / fan_in) / .87962566103423978;
  const Stats s = stats_of(w);
  EXPECT_LE(s.max_abs, 2 * stddev * (1 + 1e-6));
  EXPECT_GT(s.max_abs, 1.9 * stddev);
  EXPECT_LT(std::fabs(s.mean), 0.01 * stddev);
  EXPECT_NEAR(s.stddev, std::sqrt(2.0 / fan_in), 0.03 * std::sqrt(2.0 / fan_in));
}

TEST(Initializers, SameSeedSameValuesDifferentSeedDifferent) {
  const layers::Initializer init{"glorot_uniform"};
  const auto a = init(Shape{10, 10}, 7).to_vector<float>();
  EXPECT_EQ(a, init(Shape{10, 10}, 7).to_vector<float>());
  EXPECT_NE(a, init(Shape{10, 10}, 8).to_vector<float>());
}

TEST(Errors, UnknownActivationListsValidNames) {
  const std::string msg = message_of([] { (void)layers::Dense(10, "relu6x"); });
  EXPECT_NE(msg.find("relu6x"), std::string::npos) << msg;
  for (const char* name : {"relu", "sigmoid", "tanh", "softmax", "linear"})
    EXPECT_NE(msg.find(name), std::string::npos) << name << " missing from: " << msg;
  EXPECT_THROW((void)layers::Activation("swishy"), ValueError);
}

TEST(Errors, UnknownInitializerListsValidNames) {
  const std::string msg =
      message_of([] { (void)layers::Dense(layers::DenseOptions{.units = 3, .kernel_initializer = "glorot_unifrom"}); });
  EXPECT_NE(msg.find("glorot_unifrom"), std::string::npos) << msg;
  for (const char* name : {"glorot_uniform", "he_normal", "zeros"})
    EXPECT_NE(msg.find(name), std::string::npos) << name << " missing from: " << msg;
}

// Rank 3 is Keras' Dense on a sequence (tests/nn/sequence_layers_test.cpp); rank 1 has no features axis.
TEST(Errors, DenseOnRank1InputNamesTheShapeItNeeds) {
  auto d = layers::Dense(10);
  const std::string msg = message_of([&] { d->build(Shape{-1}, 0); });
  EXPECT_NE(msg.find("needs inputs of shape (batch, ..., features), got (None,)"), std::string::npos) << msg;
}

TEST(Errors, InvalidUnitsAndRates) {
  EXPECT_THROW((void)layers::Dense(0), ValueError);
  EXPECT_THROW((void)layers::Dropout(1.0f), ValueError);
  EXPECT_THROW((void)layers::Dropout(-0.1f), ValueError);
}

TEST(Flatten, ShapeAndValues) {
  auto f = layers::Flatten();
  EXPECT_EQ(f->compute_output_shape(Shape{-1, 28, 28}), (Shape{-1, 784}));
  EXPECT_EQ(f->compute_output_shape(Shape{-1, 2, 3, 4}), (Shape{-1, 24}));
  std::vector<float> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor y = f->call(Tensor::from_vector(v, Shape{2, 3, 4}), CallContext{});
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(y.to_vector<float>(), v);  // row-major order kept
}

TEST(Reshape, TargetShapeAndMinusOneInference) {
  auto r = layers::Reshape(Shape{7, 4});
  EXPECT_EQ(r->compute_output_shape(Shape{-1, 28}), (Shape{-1, 7, 4}));
  auto r2 = layers::Reshape(Shape{-1, 4});
  EXPECT_EQ(r2->compute_output_shape(Shape{-1, 28}), (Shape{-1, 7, 4}));
  const Tensor y = r2->call(Tensor::zeros({3, 28}), CallContext{});
  EXPECT_EQ(y.shape(), (Shape{3, 7, 4}));
}

TEST(Reshape, IncompatibleTargetNamesBothShapes) {
  auto r = layers::Reshape(Shape{5, 5});
  const std::string msg = message_of([&] { (void)r->compute_output_shape(Shape{-1, 28}); });
  EXPECT_NE(msg.find("(None, 28)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(5, 5)"), std::string::npos) << msg;
  auto r2 = layers::Reshape(Shape{-1, 5});
  EXPECT_THROW((void)r2->compute_output_shape(Shape{-1, 28}), ValueError);
  auto r3 = layers::Reshape(Shape{-1, -1});
  EXPECT_THROW((void)r3->compute_output_shape(Shape{-1, 28}), ValueError);
}

TEST(Dropout, IdentityAtInference) {
  auto d = layers::Dropout(0.5f);
  d->build(Shape{-1, 100}, 3);
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.01f - 3.0f;
  const Tensor x = Tensor::from_vector(v, Shape{10, 100});
  EXPECT_EQ(d->call(x, CallContext{.training = false, .seed = 1, .step = 5}).to_vector<float>(), v);
  EXPECT_EQ(d->count_params(), 0);
}

TEST(Dropout, TrainingDropsAboutRateAndScalesSurvivors) {
  for (float rate : {0.2f, 0.5f}) {
    auto d = layers::Dropout(rate);
    d->build(Shape{-1, 200}, 3);
    const Tensor x = Tensor::full({100, 200}, 2.0f);
    const auto y = d->call(x, CallContext{.training = true, .seed = 11, .step = 0}).to_vector<float>();
    std::size_t zeros = 0;
    for (float v : y) {
      if (v == 0.0f) {
        ++zeros;
      } else {
        EXPECT_NEAR(v, 2.0f / (1.0f - rate), 1e-5) << "rate " << rate;
      }
    }
    const double frac = static_cast<double>(zeros) / static_cast<double>(y.size());
    EXPECT_NEAR(frac, rate, 0.02) << "rate " << rate;
    // A new step draws a new mask.
    const auto y2 = d->call(x, CallContext{.training = true, .seed = 11, .step = 1}).to_vector<float>();
    EXPECT_NE(y, y2);
    // The same key gives the same mask.
    EXPECT_EQ(y, d->call(x, CallContext{.training = true, .seed = 11, .step = 0}).to_vector<float>());
  }
}

TEST(Activation, AppliesTheNamedFunction) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, -1, 0, 1}, Shape{2, 3});
  const auto sm = layers::Activation("softmax")->call(x, CallContext{}).to_vector<float>();
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(sm[0], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(sm[2], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(sm[3] + sm[4] + sm[5], 1.0, 1e-6);
  const auto sg = layers::Activation("sigmoid")->call(x, CallContext{}).to_vector<float>();
  EXPECT_NEAR(sg[3], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(sg[4], 0.5, 1e-7);
  const auto rl = layers::Activation("relu")->call(x, CallContext{}).to_vector<float>();
  EXPECT_EQ(rl, (std::vector<float>{1, 2, 3, 0, 0, 1}));
  const auto th = layers::Activation("tanh")->call(x, CallContext{}).to_vector<float>();
  EXPECT_NEAR(th[1], std::tanh(2.0), 1e-6);
  auto a = layers::Activation("relu");
  EXPECT_EQ(a->compute_output_shape(Shape{-1, 3}), (Shape{-1, 3}));
  EXPECT_EQ(a->class_name(), "Activation");
}

}  // namespace
}  // namespace lockstep
