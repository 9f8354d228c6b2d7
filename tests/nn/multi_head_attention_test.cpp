// MultiHeadAttention: Keras 3's computation worked out in plain loops (projections per head,
// scaled softmax, output projection), its weights (Keras' names, shapes, order), gradients,
// configuration and argument errors.
#include "lockstep/layers/multi_head_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "lockstep/autograd/gradcheck.hpp"
#include "lockstep/layers/layer_registry.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using layers::MultiHeadAttentionLayer;

using test::random_uniform;

std::shared_ptr<MultiHeadAttentionLayer> built(const layers::MultiHeadAttentionOptions& o,
                                               std::int64_t features) {
  auto l = std::dynamic_pointer_cast<MultiHeadAttentionLayer>(layers::MultiHeadAttention(o));
  l->build_merge({Shape{-1, 3, features}, Shape{-1, 5, features}}, 11);
  // Biases are zeros at first: give them values, so that the test sees them used.
  std::uint64_t seed = 20;
  for (const auto& v : l->variables()) v.assign(random_uniform(v.shape(), ++seed));
  return l;
}

// Keras' MultiHeadAttention in loops: x [b, len, f] through kernel [f, h, k] + bias [h, k].
std::vector<double> project(const Tensor& x, const Variable& kernel, const Variable* bias) {
  const auto xv = x.to_vector<float>(), kv = kernel.value().to_vector<float>();
  const std::int64_t rows = x.dim(0) * x.dim(1), f = x.dim(2), hk = kernel.shape()[1] * kernel.shape()[2];
  std::vector<double> out(static_cast<std::size_t>(rows * hk));
  const auto bv =
      bias ? bias->value().to_vector<float>() : std::vector<float>(static_cast<std::size_t>(hk), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < hk; ++j) {
      double s = bv[static_cast<std::size_t>(j)];
      for (std::int64_t c = 0; c < f; ++c)
        s += double(xv[static_cast<std::size_t>(r * f + c)]) * kv[static_cast<std::size_t>(c * hk + j)];
      out[static_cast<std::size_t>(r * hk + j)] = s;
    }
  return out;  // [b, len, h, k]
}

// keep(e, i, j): whether query step i of example e may attend to value step j besides the causal
// rule (null: every step); a masked score is Keras' -1e9, so a row with none kept is uniform.
using Keep = std::function<bool(std::int64_t, std::int64_t, std::int64_t)>;

std::vector<double> reference(const MultiHeadAttentionLayer& l, const Tensor& query, const Tensor& value,
                              const Tensor& key, bool causal, const Keep& keep = nullptr) {
  const auto& v = l.variables();  // query k/b, key k/b, value k/b, output k/b
  const std::int64_t b = query.dim(0), t = query.dim(1), s = value.dim(1), h = l.options().num_heads,
                     kd = l.options().key_dim, vd = l.value_dim(), out_dim = v[6].shape()[2];
  const auto q = project(query, v[0], &v[1]), k = project(key, v[2], &v[3]), vv = project(value, v[4], &v[5]);
  const auto ok = v[6].value().to_vector<float>(), ob = v[7].value().to_vector<float>();
  std::vector<double> out(static_cast<std::size_t>(b * t * out_dim));
  for (std::int64_t e = 0; e < b; ++e)
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<double> heads(static_cast<std::size_t>(h * vd), 0.0);
      for (std::int64_t hh = 0; hh < h; ++hh) {
        std::vector<double> p(static_cast<std::size_t>(s));
        double top = -1e300, sum = 0;
        for (std::int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < kd; ++c)
            dot += q[static_cast<std::size_t>(((e * t + i) * h + hh) * kd + c)] *
                   k[static_cast<std::size_t>(((e * s + j) * h + hh) * kd + c)];
          const bool masked = (causal && j > i) || (keep && !keep(e, i, j));
          p[static_cast<std::size_t>(j)] = masked ? -1e9 : dot / std::sqrt(double(kd));
          top = std::max(top, p[static_cast<std::size_t>(j)]);
        }
        for (auto& x : p) sum += (x = std::exp(x - top));
        for (std::int64_t j = 0; j < s; ++j)
          for (std::int64_t c = 0; c < vd; ++c)
            heads[static_cast<std::size_t>(hh * vd + c)] +=
                p[static_cast<std::size_t>(j)] / sum *
                vv[static_cast<std::size_t>(((e * s + j) * h + hh) * vd + c)];
      }
      for (std::int64_t o = 0; o < out_dim; ++o) {
        double y = ob[static_cast<std::size_t>(o)];
        for (std::int64_t x = 0; x < h * vd; ++x)
          y += heads[static_cast<std::size_t>(x)] * ok[static_cast<std::size_t>(x * out_dim + o)];
        out[static_cast<std::size_t>((e * t + i) * out_dim + o)] = y;
      }
    }
  return out;
}

void expect_near(const Tensor& got, const std::vector<double>& want, const char* what) {
  const auto g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << what << " " << i;
}

TEST(MultiHeadAttention, ComputesKerasAttentionPerHead) {
  const auto l = built({.num_heads = 2, .key_dim = 3, .value_dim = 4, .output_shape = 6}, 5);
  const Tensor x = random_uniform({2, 3, 5}, 1), value = random_uniform({2, 5, 5}, 2),
               key = random_uniform({2, 5, 5}, 3);
  expect_near(l->merge({x, x}, CallContext{}), reference(*l, x, x, x, false), "self");
  expect_near(l->merge({x, value, key}, CallContext{}), reference(*l, x, value, key, false), "cross");
  expect_near(l->attend(x, x, Tensor(), CallContext{}, {.use_causal_mask = true}),
              reference(*l, x, x, x, true), "causal");
  Tensor scores;
  expect_near(l->attend(x, value, Tensor(), CallContext{}, {.attention_scores = &scores}),
              reference(*l, x, value, value, false), "unfused");
  EXPECT_EQ(scores.shape(), (Shape{2, 2, 3, 5}));
  const auto p = scores.to_vector<float>();
  for (std::size_t row = 0; row < p.size() / 5; ++row) {
    double sum = 0;
    for (std::size_t j = 0; j < 5; ++j) sum += p[row * 5 + j];
    EXPECT_NEAR(sum, 1.0, 1e-5) << row;
  }
}

// Keras' _compute_attention_mask: query step i attends to value step j where the query's mask
// keeps i, the value's and the key's keep j, the causal rule and the explicit attention_mask
// allow it; a padded query step attends to every value step alike. Fused and unfused alike.
TEST(MultiHeadAttention, CombinesTheInputsMasksAsKeras) {
  const auto l = built({.num_heads = 2, .key_dim = 3, .value_dim = 4, .output_shape = 6}, 5);
  const Tensor x = random_uniform({2, 3, 5}, 1), value = random_uniform({2, 5, 5}, 2),
               key = random_uniform({2, 5, 5}, 3);
  // Masks of several dtypes, nonzero where a step counts.
  const std::vector<std::uint8_t> qv{1, 1, 0, 1, 0, 0}, vv{1, 1, 1, 0, 0, 0, 1, 1, 1, 1}, kv{1, 0, 1, 1, 1, 1, 1, 0, 1, 1};
  const Tensor q_mask = Tensor::from_vector(qv, {2, 3});
  const Tensor v_mask = cast(Tensor::from_vector(vv, {2, 5}), DType::kF32);
  const Tensor k_mask = cast(Tensor::from_vector(kv, {2, 5}), DType::kI32);
  std::vector<std::uint8_t> ev(2 * 3 * 5);
  for (std::size_t i = 0; i < ev.size(); ++i) ev[i] = i % 4 != 2;
  const Tensor explicit_mask = Tensor::from_vector(ev, {2, 3, 5});
  const auto q = [&](std::int64_t e, std::int64_t i) { return qv[static_cast<std::size_t>(e * 3 + i)] != 0; };
  const auto v = [&](std::int64_t e, std::int64_t j) { return vv[static_cast<std::size_t>(e * 5 + j)] != 0; };
  const auto k = [&](std::int64_t e, std::int64_t j) { return kv[static_cast<std::size_t>(e * 5 + j)] != 0; };
  const auto ex = [&](std::int64_t e, std::int64_t i, std::int64_t j) {
    return ev[static_cast<std::size_t>((e * 3 + i) * 5 + j)] != 0;
  };
  const CallContext c;
  using layers::AttentionCall;
  // The value's mask alone (the kernel takes it as it is), then with the key's.
  expect_near(l->attend(x, value, Tensor(), c, {.value_mask = v_mask}),
              reference(*l, x, value, value, false, [&](auto e, auto, auto j) { return v(e, j); }), "value");
  const Tensor v_mask_u8 = Tensor::from_vector(std::vector<std::uint8_t>{2, 1, 7, 0, 0, 0, 1, 1, 1, 1}, {2, 5});
  for (const bool fused : {true, false}) {
    Tensor probabilities;
    expect_near(l->attend(x, value, Tensor(), c,
                          {.value_mask = v_mask_u8, .attention_scores = fused ? nullptr : &probabilities}),
                reference(*l, x, value, value, false, [&](auto e, auto, auto j) { return v(e, j); }),
                fused ? "value, uint8" : "value, uint8, unfused");
  }
  expect_near(l->attend(x, value, key, c, {.value_mask = v_mask, .key_mask = k_mask}),
              reference(*l, x, value, key, false, [&](auto e, auto, auto j) { return v(e, j) && k(e, j); }),
              "value and key");
  // The query's mask alone: its padded steps attend to everything alike.
  const auto query_only = l->attend(x, value, Tensor(), c, {.query_mask = q_mask});
  expect_near(query_only, reference(*l, x, value, value, false, [&](auto e, auto i, auto) { return q(e, i); }),
              "query");
  EXPECT_NE(query_only.to_vector<float>(), l->merge({x, value}, c).to_vector<float>());
  // Everything: query, value, key, causal and explicit.
  const Keep all = [&](auto e, auto i, auto j) { return q(e, i) && v(e, j) && k(e, j) && ex(e, i, j); };
  const AttentionCall every{.query_mask = q_mask,
                            .value_mask = v_mask,
                            .key_mask = k_mask,
                            .attention_mask = explicit_mask,
                            .use_causal_mask = true};
  expect_near(l->attend(x, value, key, c, every), reference(*l, x, value, key, true, all), "all");
  Tensor scores;
  AttentionCall unfused = every;
  unfused.attention_scores = &scores;
  expect_near(l->attend(x, value, key, c, unfused), reference(*l, x, value, key, true, all), "all, unfused");
  // Self-attention: the query's mask and the value's (the same one), with the causal mask.
  const std::vector<std::uint8_t> xv{1, 1, 0, 1, 0, 1};
  const Tensor x_mask = Tensor::from_vector(xv, {2, 3});
  const auto kept = [&](std::int64_t e, std::int64_t s) { return xv[static_cast<std::size_t>(e * 3 + s)] != 0; };
  expect_near(l->attend(x, x, Tensor(), c, {.query_mask = x_mask, .value_mask = x_mask, .use_causal_mask = true}),
              reference(*l, x, x, x, true, [&](auto e, auto i, auto j) { return kept(e, i) && kept(e, j); }),
              "self, causal");

  const std::string wrong = test::message_of([&] {
    (void)l->attend(x, value, Tensor(), c, {.value_mask = q_mask});
  });
  EXPECT_NE(wrong.find("value_mask must have the shape of the value's steps (2, 5), got (2, 3)"), std::string::npos)
      << wrong;
  EXPECT_NE(wrong.find("MultiHeadAttention"), std::string::npos) << wrong;
}

TEST(MultiHeadAttention, HasKerasWeightsInKerasOrder) {
  auto l = std::dynamic_pointer_cast<MultiHeadAttentionLayer>(
      layers::MultiHeadAttention({.num_heads = 2, .key_dim = 3, .name = "mha"}));
  l->build_merge({Shape{-1, 5, 8}, Shape{-1, 5, 8}}, 0);
  const std::vector<std::pair<std::string, Shape>> want{{"mha/query/kernel", {8, 2, 3}},
                                                        {"mha/query/bias", {2, 3}},
                                                        {"mha/key/kernel", {8, 2, 3}},
                                                        {"mha/key/bias", {2, 3}},
                                                        {"mha/value/kernel", {8, 2, 3}},
                                                        {"mha/value/bias", {2, 3}},
                                                        {"mha/attention_output/kernel", {2, 3, 8}},
                                                        {"mha/attention_output/bias", {8}}};
  ASSERT_EQ(l->variables().size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(l->variables()[i].name(), want[i].first);
    EXPECT_EQ(l->variables()[i].shape(), want[i].second) << want[i].first;
  }
  EXPECT_EQ(l->keras_weight_path(0), "query_dense/vars/0");
  EXPECT_EQ(l->keras_weight_path(7), "output_dense/vars/1");
  auto no_bias = std::dynamic_pointer_cast<MultiHeadAttentionLayer>(
      layers::MultiHeadAttention({.num_heads = 2, .key_dim = 3, .use_bias = false}));
  no_bias->build_merge({Shape{-1, 5, 8}, Shape{-1, 5, 8}}, 0);
  EXPECT_EQ(no_bias->variables().size(), 4u);
  EXPECT_EQ(no_bias->keras_weight_path(3), "output_dense/vars/0");
}

TEST(MultiHeadAttention, GradientsMatchFiniteDifferences) {
  const auto l = built({.num_heads = 2, .key_dim = 2, .dropout = 0.3f}, 3);
  const CallContext training{.training = true, .seed = 4, .step = 1};
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return l->merge({in[0], in[1]}, training);
      },
      {random_uniform({2, 3, 3}, 5), random_uniform({2, 5, 3}, 6)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(MultiHeadAttention, DropoutOnlyInTraining) {
  const auto l = built({.num_heads = 2, .key_dim = 3, .dropout = 0.5f}, 5);
  const Tensor x = random_uniform({2, 3, 5}, 1);
  const auto plain = l->merge({x, x}, CallContext{}).to_vector<float>();
  EXPECT_EQ(l->merge({x, x}, CallContext{.seed = 1}).to_vector<float>(), plain);
  EXPECT_NE(l->merge({x, x}, CallContext{.training = true, .seed = 1}).to_vector<float>(), plain);
}

TEST(MultiHeadAttention, ConfigHasKerasNamesAndDefaultsAndRoundTrips) {
  auto l = layers::MultiHeadAttention({.num_heads = 4, .key_dim = 16, .name = "mha"});
  const nlohmann::json c = l->get_config();
  EXPECT_EQ(c.at("num_heads"), 4);
  EXPECT_EQ(c.at("key_dim"), 16);
  EXPECT_EQ(c.at("value_dim"), 16);
  EXPECT_EQ(c.at("dropout"), 0.0);
  EXPECT_EQ(c.at("use_bias"), true);
  EXPECT_TRUE(c.at("output_shape").is_null());
  EXPECT_EQ(c.at("kernel_initializer"), "glorot_uniform");
  EXPECT_EQ(c.at("bias_initializer"), "zeros");
  const auto cls = layers::find_layer_class("MultiHeadAttention");
  ASSERT_TRUE(cls.has_value());
  nlohmann::json edited = c;
  edited["value_dim"] = 8;
  edited["output_shape"] = nlohmann::json::array({12});
  const auto back = cls->from_config(edited);
  EXPECT_EQ(back->get_config().at("value_dim"), 8);
  EXPECT_EQ(back->get_config().at("output_shape"), 12);
  edited["output_shape"] = nlohmann::json::array({3, 4});
  EXPECT_THROW(cls->from_config(edited), ValueError);
}

TEST(MultiHeadAttention, BadArgumentsAndInputsAreNamed) {
  EXPECT_THROW(layers::MultiHeadAttention({.num_heads = 0, .key_dim = 2}), ValueError);
  EXPECT_THROW(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 2, .dropout = 1.0f}), ValueError);
  auto l = std::dynamic_pointer_cast<MultiHeadAttentionLayer>(
      layers::MultiHeadAttention({.num_heads = 2, .key_dim = 2, .name = "mha"}));
  const std::string one = test::message_of([&] { (void)l->merge_output_shape({Shape{-1, 3, 4}}); });
  EXPECT_NE(one.find("[query, value]"), std::string::npos) << one;
  const std::string features = test::message_of([&] {
    (void)l->merge_output_shape({Shape{-1, 3, 4}, Shape{-1, 5, 6}});
  });
  EXPECT_NE(features.find("query's features"), std::string::npos) << features;
  const std::string lengths = test::message_of([&] {
    (void)l->merge_output_shape({Shape{-1, 3, 4}, Shape{-1, 5, 4}, Shape{-1, 6, 4}});
  });
  EXPECT_NE(lengths.find("one length"), std::string::npos) << lengths;
  EXPECT_EQ(l->merge_output_shape({Shape{-1, 3, 4}, Shape{-1, 5, 4}}), (Shape{-1, 3, 4}));
  const std::string unbuilt = test::message_of([&] {
    (void)l->merge({Tensor::zeros({1, 3, 4}), Tensor::zeros({1, 3, 4})}, {});
  });
  EXPECT_NE(unbuilt.find("before it was built"), std::string::npos) << unbuilt;
}

}  // namespace
}  // namespace lockstep
