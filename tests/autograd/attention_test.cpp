// The fused scaled_dot_product_attention against its unfused composition (attention_reference):
// forward and gradients through the tape, with and without masks, causal, tq != tk, dropout,
// 16-bit storage; its memory (no [tq, tk] matrix), its threads, and its argument errors.
#include "lockstep/tensor/attention.hpp"

#include <gtest/gtest.h>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "common/relative_error.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/ops.hpp"

using namespace lockstep;
using test::random_uniform;

namespace {
struct Case {
  const char* name;
  std::int64_t b, h, tq, tk, d, dv;
  Tensor mask;
  AttentionOptions options;
};

// A mask of [b, rows, tk] with a few keys of each row off (never all of them).
Tensor some_keys_off(std::int64_t b, std::int64_t rows, std::int64_t tk) {
  std::vector<std::uint8_t> m(static_cast<std::size_t>(b * rows * tk));
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = (i * 7 + i / 5) % 4 != 1;
  for (std::int64_t r = 0; r < b * rows; ++r) m[static_cast<std::size_t>(r * tk)] = 1;
  return rows == 1 ? Tensor::from_vector(m, {b, tk}) : Tensor::from_vector(m, {b, rows, tk});
}

std::vector<Case> cases() {
  const DropoutKey key{.seed = 9, .stream = 4, .step = 2, .first_example = 6};
  return {
      {"plain", 2, 3, 7, 7, 8, 8, {}, {}},
      {"tq_ne_tk", 2, 2, 5, 70, 6, 3, {}, {}},
      {"causal", 1, 2, 66, 66, 4, 4, {}, {.causal = true}},
      {"padding_mask", 2, 2, 9, 40, 5, 5, some_keys_off(2, 1, 40), {}},
      {"query_mask_causal", 2, 1, 35, 20, 4, 6, some_keys_off(2, 35, 20), {.causal = true}},
      {"dropout", 2, 2, 12, 70, 4, 4, {}, {.dropout_rate = 0.25f, .dropout_key = key}},
      // Query 1 has nothing to attend to (a uniform average; its keys and values still get gradients).
      {"fully_masked_row",
       1,
       2,
       3,
       4,
       3,
       2,
       Tensor::from_vector<std::uint8_t>({1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0}, {1, 3, 4}),
       {.causal = false}},
      {"dropout_causal_mask",
       3,
       2,
       10,
       10,
       3,
       5,
       some_keys_off(3, 1, 10),
       {.causal = true, .dropout_rate = 0.4f, .dropout_key = key, .scale = 0.7f}},
  };
}

std::vector<std::vector<float>> run(bool fused, const Case& c, const std::vector<Tensor>& in, DType dtype) {
  std::vector<Tensor> x;
  for (const Tensor& t : in) x.push_back(cast(t, dtype));
  GradientTape tape;
  for (const Tensor& t : x) tape.watch(t);
  const Tensor out = fused ? scaled_dot_product_attention(x[0], x[1], x[2], c.mask, c.options)
                           : attention_reference(x[0], x[1], x[2], c.mask, c.options);
  const auto g = tape.gradient(out, std::vector<Tensor>{x[0], x[1], x[2]}, cast(in[3], dtype));
  std::vector<std::vector<float>> all{cast(out, DType::kF32).to_vector<float>()};
  for (const Tensor& t : g) all.push_back(cast(t, DType::kF32).to_vector<float>());
  return all;
}

std::vector<Tensor> inputs(const Case& c) {
  return {random_uniform({c.b, c.h, c.tq, c.d}, 1, -2, 2), random_uniform({c.b, c.h, c.tk, c.d}, 2, -2, 2),
          random_uniform({c.b, c.h, c.tk, c.dv}, 3), random_uniform({c.b, c.h, c.tq, c.dv}, 4)};
}
}  // namespace

class FusedAttention : public ::testing::TestWithParam<std::size_t> {};

TEST_P(FusedAttention, OutputAndGradientsAreTheUnfusedCompositions) {
  const Case c = cases()[GetParam()];
  const auto in = inputs(c);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const double tol = dtype == DType::kF32 ? 2e-5 : 3e-2;
    const auto fused = run(true, c, in, dtype), unfused = run(false, c, in, dtype);
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_LE(test::max_rel_diff({fused[i]}, {unfused[i]}), tol)
          << c.name << " " << what[i] << " " << dtype_name(dtype);
  }
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedAttention, ::testing::Range<std::size_t>(0, cases().size()),
                         [](const auto& info) { return std::string(cases()[info.param].name); });

TEST(FusedAttention, DropoutDropsWhatDropoutOfTheProbabilitiesDrops) {
  // With v = identity rows, out[i, j] is the kept probability of key j: zero exactly where
  // dropout of the [b, h, tq, tk] probabilities drops, and about the rate of them.
  const std::int64_t b = 2, h = 2, t = 48;
  std::vector<float> eye(static_cast<std::size_t>(b * h * t * t), 0.0f);
  for (std::int64_t x = 0; x < b * h; ++x)
    for (std::int64_t j = 0; j < t; ++j) eye[static_cast<std::size_t>((x * t + j) * t + j)] = 1.0f;
  const Tensor v = Tensor::from_vector(eye, {b, h, t, t});
  const Tensor q = random_uniform({b, h, t, 8}, 5), k = random_uniform({b, h, t, 8}, 6);
  const AttentionOptions o{.dropout_rate = 0.5f,
                           .dropout_key = {.seed = 1, .stream = 2, .step = 3, .first_example = 4}};
  const auto fused = scaled_dot_product_attention(q, k, v, {}, o).to_vector<float>();
  const auto dropped = dropout(Tensor::ones({b, h, t, t}), o.dropout_rate, o.dropout_key).to_vector<float>();
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    ASSERT_EQ(fused[i] == 0.0f, dropped[i] == 0.0f) << "unit " << i;
    zeros += fused[i] == 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(fused.size()), 0.5, 0.05);
}

TEST(FusedAttention, ARowWithNothingToAttendToAveragesEveryValue) {
  // Keras' rule (masked scores are -1e9): no NaN, the mean of the values.
  const Tensor q = random_uniform({1, 1, 2, 4}, 7), k = random_uniform({1, 1, 3, 4}, 8);
  const Tensor v = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {1, 1, 3, 2});
  const Tensor mask = Tensor::from_vector<std::uint8_t>({0, 0, 0, 1, 0, 0}, {1, 2, 3});
  const auto out = scaled_dot_product_attention(q, k, v, mask).to_vector<float>();
  EXPECT_NEAR(out[0], 3.0f, 1e-6);
  EXPECT_NEAR(out[1], 4.0f, 1e-6);
  EXPECT_NEAR(out[2], 1.0f, 1e-6);  // the second row attends to key 0 alone
  EXPECT_NEAR(out[3], 2.0f, 1e-6);
}

TEST(FusedAttention, TheSameBitsWhateverTheThreads) {
  // 6 (batch, head)s: one thread's backward takes each whole, three threads' split each into
  // key blocks (dk, dv) and query blocks (dq); both schedules must give the same bits.
  const DropoutKey key{.seed = 3, .stream = 1, .step = 5};
  for (const Case& c : {Case{"threads", 2, 3, 70, 90, 8, 8, some_keys_off(2, 1, 90), {.causal = true}},
                        Case{"threads_dropout",
                             2,
                             3,
                             130,
                             70,
                             20,
                             12,
                             {},
                             {.causal = true, .dropout_rate = 0.3f, .dropout_key = key}}}) {
    const auto in = inputs(c);
    std::vector<std::vector<float>> results[2];
    for (int threads : {1, 3}) {
      auto ctx = make_compute_context(Device{}, threads);
      ComputeScope scope(*ctx);
      results[threads == 1 ? 0 : 1] = run(true, c, in, DType::kF32);
    }
    EXPECT_EQ(results[0], results[1]) << c.name;
  }
}

TEST(FusedAttention, PeakMemoryAtSequence4096IsAnEighthOfTheUnfusedOrLess) {
  // b = 1, h = 1, d = 64: the unfused composition holds [4096, 4096] scores (64 MiB each); the
  // fused op holds its output and the row log-sum-exps.
  const std::int64_t t = 4096, d = 64;
  const Tensor q = random_uniform({1, 1, t, d}, 9), k = random_uniform({1, 1, t, d}, 10),
               v = random_uniform({1, 1, t, d}, 11);
  auto& ctx = current_compute_context();
  const auto peak_of = [&](const auto& f) {
    const std::uint64_t before = context_bytes_in_use(ctx);
    reset_context_peak_bytes(ctx);
    { const Tensor out = f(); }
    return context_peak_bytes(ctx) - before;
  };
  const AttentionOptions o{.causal = true};
  const std::uint64_t fused = peak_of([&] { return scaled_dot_product_attention(q, k, v, {}, o); });
  const std::uint64_t unfused = peak_of([&] { return attention_reference(q, k, v, {}, o); });
  RecordProperty("fused_peak_bytes", std::to_string(fused));
  RecordProperty("unfused_peak_bytes", std::to_string(unfused));
  EXPECT_GE(unfused, static_cast<std::uint64_t>(t * t * 4));
  EXPECT_LE(fused * 8, unfused) << "fused " << fused << " bytes, unfused " << unfused;
}

TEST(FusedAttention, BadArgumentsAreNamedErrors) {
  const Tensor q = Tensor::zeros({2, 1, 3, 4}), k = Tensor::zeros({2, 1, 5, 4}),
               v = Tensor::zeros({2, 1, 5, 6});
  const std::string depth = test::message_of([&] {
    (void)scaled_dot_product_attention(q, Tensor::zeros({2, 1, 5, 3}), v);
  });
  EXPECT_NE(depth.find("(2, 1, 5, 3)"), std::string::npos) << depth;
  const std::string rank = test::message_of([&] {
    (void)scaled_dot_product_attention(Tensor::zeros({3, 4}), k, v);
  });
  EXPECT_NE(rank.find("[batch, heads, length, depth]"), std::string::npos) << rank;
  const std::string mask = test::message_of([&] {
    (void)scaled_dot_product_attention(q, k, v, Tensor::zeros({2, 4}, DType::kU8));
  });
  EXPECT_NE(mask.find("mask"), std::string::npos) << mask;
  EXPECT_NE(mask.find("(2, 4)"), std::string::npos) << mask;
  const std::string float_mask = test::message_of([&] {
    (void)scaled_dot_product_attention(q, k, v, Tensor::ones({2, 5}));
  });
  EXPECT_NE(float_mask.find("uint8"), std::string::npos) << float_mask;
  const std::string rate =
      test::message_of([&] { (void)scaled_dot_product_attention(q, k, v, {}, {.dropout_rate = 1.0f}); });
  EXPECT_NE(rate.find("dropout rate"), std::string::npos) << rate;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, Tensor::ones({1, 3, 5}, DType::kU8)).shape(),
            (Shape{2, 1, 3, 6}));
}
