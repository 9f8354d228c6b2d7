// lstm_cell and gru_cell (one LSTM or GRU step as one op) against the ops they replace in
// LSTMLayer::step and GRULayer::step: the same bits forward in every floating dtype, the same
// gradients to float32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "lockstep/lockstep.hpp"
#include "lockstep/tensor/ops_recurrent.hpp"
#include "common/error_message.hpp"

using namespace lockstep;

namespace {
Tensor random_tensor(const Shape& s, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = n(rng);
  return Tensor::from_vector(v, s);
}

// Gate g's columns of z [batch, gates * units], as RecurrentLayer::gate takes them (a recorded gather).
Tensor gate(const Tensor& z, std::int64_t batch, std::int64_t units, std::int64_t g, std::int64_t gates = 4) {
  std::vector<std::int64_t> rows;
  for (std::int64_t r = 0; r < batch; ++r) rows.push_back(r * gates + g);
  return gather_rows(reshape(z, {batch * gates, units}), Tensor::from_vector(rows, Shape{batch}));
}

// The composed GRU step (reset_after=True), as GRULayer::step runs it for other activations.
Tensor composed_gru(const Tensor& x, const Tensor& inner, const Tensor& h) {
  const std::int64_t batch = h.dim(0), u = h.dim(1);
  const auto g = [&](const Tensor& t, std::int64_t k) { return gate(t, batch, u, k, 3); };
  const Tensor z = sigmoid(add(g(x, 0), g(inner, 0)));
  const Tensor r = sigmoid(add(g(x, 1), g(inner, 1)));
  const Tensor hh = tanh(add(g(x, 2), mul(r, g(inner, 2))));
  return add(mul(z, h), mul(add_scalar(neg(z), 1.0f), hh));
}

// The composed step (the ops LSTMLayer::step runs for other activations): {h, c}.
std::array<Tensor, 2> composed(const Tensor& a, const Tensor& b, const Tensor& c_prev) {
  const std::int64_t batch = c_prev.dim(0), u = c_prev.dim(1);
  const Tensor z = add(a, b);
  const Tensor i = sigmoid(gate(z, batch, u, 0)), f = sigmoid(gate(z, batch, u, 1));
  const Tensor c = add(mul(f, c_prev), mul(i, tanh(gate(z, batch, u, 2))));
  const Tensor o = sigmoid(gate(z, batch, u, 3));
  return {mul(o, tanh(c)), c};
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
  t.copy_to_host(v.data(), v.size());
  return v;
}

struct Inputs {
  Tensor a, b, c_prev;
};
// Values that reach both tails of sigmoid and tanh (|z| up to ~12), c_prev of either sign.
Inputs inputs(std::int64_t batch, std::int64_t units, DType dt) {
  return {random_tensor({batch, 4 * units}, 1, 3.0f).to(dt), random_tensor({batch, 4 * units}, 2, 2.0f).to(dt),
          random_tensor({batch, units}, 3, 1.5f).to(dt)};
}
}  // namespace

TEST(LstmCell, HasTheComposedOpsBitsInEveryFloatingDtype) {
  for (const DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const auto& [batch, units] : {std::pair<std::int64_t, std::int64_t>{3, 5}, {64, 64}, {1, 1}}) {
      const Inputs in = inputs(batch, units, dt);
      const Tensor hc = lstm_cell(in.a, in.b, in.c_prev);
      ASSERT_EQ(hc.shape(), (Shape{2, batch, units}));
      ASSERT_EQ(hc.dtype(), dt);
      const auto [h, c] = composed(in.a, in.b, in.c_prev);
      const std::string what = std::string(dtype_name(dt)) + " " + std::to_string(batch) + "x" + std::to_string(units);
      EXPECT_EQ(bytes_of(hc.slice(0, 1).reshape(h.shape())), bytes_of(h)) << "h, " << what;
      EXPECT_EQ(bytes_of(hc.slice(1, 2).reshape(c.shape())), bytes_of(c)) << "c, " << what;
    }
  }
}

TEST(LstmCell, NanAndInfinityGoThroughAsInTheComposedOps) {
  const std::int64_t batch = 1, units = 3;
  Inputs in = inputs(batch, units, DType::kF32);
  std::vector<float> a = in.a.to_vector<float>();
  a[0] = std::numeric_limits<float>::quiet_NaN();       // i of unit 0
  a[units + 1] = std::numeric_limits<float>::infinity();  // f of unit 1
  a[2 * units + 2] = -std::numeric_limits<float>::infinity();  // the candidate of unit 2
  in.a = Tensor::from_vector(a, in.a.shape());
  const auto [h, c] = composed(in.a, in.b, in.c_prev);
  const Tensor hc = lstm_cell(in.a, in.b, in.c_prev);
  EXPECT_EQ(bytes_of(hc.slice(0, 1).reshape(h.shape())), bytes_of(h));
  EXPECT_EQ(bytes_of(hc.slice(1, 2).reshape(c.shape())), bytes_of(c));
  EXPECT_TRUE(std::isnan(hc.to_vector<float>()[0]));
}

TEST(LstmCell, GradientsMatchTheComposedOps) {
  const std::int64_t batch = 4, units = 6;
  const Inputs in = inputs(batch, units, DType::kF32);
  const Tensor wh = random_tensor({batch, units}, 7, 1.0f), wc = random_tensor({batch, units}, 8, 1.0f);
  const auto grads = [&](bool fused) {
    Variable a(in.a), b(in.b), c_prev(in.c_prev);
    GradientTape tape;
    Tensor h, c;
    if (fused) {
      const Tensor hc = reshape(lstm_cell(a.value(), b.value(), c_prev.value()), {2 * batch, units});
      std::vector<std::int64_t> first(static_cast<std::size_t>(batch)), second = first;
      for (std::int64_t r = 0; r < batch; ++r) {
        first[static_cast<std::size_t>(r)] = r;
        second[static_cast<std::size_t>(r)] = batch + r;
      }
      h = gather_rows(hc, Tensor::from_vector(first, Shape{batch}));
      c = gather_rows(hc, Tensor::from_vector(second, Shape{batch}));
    } else {
      const auto hc = composed(a.value(), b.value(), c_prev.value());
      h = hc[0];
      c = hc[1];
    }
    const Tensor loss = add(sum(mul(h, wh)), sum(mul(c, wc)));  // both halves reach the loss
    return tape.gradient(loss, std::vector<Variable>{a, b, c_prev});
  };
  const auto fused = grads(true), reference = grads(false);
  const char* names[] = {"projected", "recurrent", "c_prev"};
  for (std::size_t k = 0; k < 3; ++k) {
    const auto f = fused[k].to_vector<float>(), r = reference[k].to_vector<float>();
    ASSERT_EQ(f.size(), r.size());
    for (std::size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], r[i], 1e-6 + 1e-5 * std::fabs(r[i])) << names[k] << " " << i;
  }
}

TEST(LstmCell, RefusesShapesThatAreNotOneStep) {
  const Inputs in = inputs(2, 3, DType::kF32);
  EXPECT_NE(test::message_of([&] { (void)lstm_cell(in.a, in.b, random_tensor({2, 4}, 1, 1.0f)); })
                .find("the gates' inputs must be (batch, 4 units) = (2, 16)"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] { (void)lstm_cell(in.a, in.b, in.a.reshape({24})); }).find("c_prev must be (batch, units)"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] { (void)lstm_cell(in.a, in.b.to(DType::kBF16), in.c_prev); }).find("lstm_cell"),
            std::string::npos);
}

TEST(GruCell, HasTheComposedOpsBitsInEveryFloatingDtype) {
  for (const DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const auto& [batch, units] : {std::pair<std::int64_t, std::int64_t>{3, 5}, {64, 64}, {1, 1}}) {
      const Tensor x = random_tensor({batch, 3 * units}, 4, 3.0f).to(dt),
                   inner = random_tensor({batch, 3 * units}, 5, 2.0f).to(dt),
                   h_prev = random_tensor({batch, units}, 6, 0.7f).to(dt);
      const Tensor h = gru_cell(x, inner, h_prev);
      ASSERT_EQ(h.shape(), h_prev.shape());
      EXPECT_EQ(bytes_of(h), bytes_of(composed_gru(x, inner, h_prev)))
          << dtype_name(dt) << " " << batch << "x" << units;
    }
  }
}

TEST(GruCell, GradientsMatchTheComposedOps) {
  const std::int64_t batch = 4, units = 6;
  const Tensor x0 = random_tensor({batch, 3 * units}, 4, 2.0f), inner0 = random_tensor({batch, 3 * units}, 5, 2.0f),
               h0 = random_tensor({batch, units}, 6, 0.7f), w = random_tensor({batch, units}, 9, 1.0f);
  const auto grads = [&](bool fused) {
    Variable x(x0), inner(inner0), h_prev(h0);
    GradientTape tape;
    const Tensor h = fused ? gru_cell(x.value(), inner.value(), h_prev.value())
                           : composed_gru(x.value(), inner.value(), h_prev.value());
    return tape.gradient(sum(mul(h, w)), std::vector<Variable>{x, inner, h_prev});
  };
  const auto fused = grads(true), reference = grads(false);
  const char* names[] = {"x", "inner", "h_prev"};
  for (std::size_t k = 0; k < 3; ++k) {
    const auto f = fused[k].to_vector<float>(), r = reference[k].to_vector<float>();
    ASSERT_EQ(f.size(), r.size());
    for (std::size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], r[i], 1e-6 + 1e-5 * std::fabs(r[i])) << names[k] << " " << i;
  }
}

TEST(GruCell, RefusesShapesThatAreNotOneStep) {
  const Tensor x = random_tensor({2, 9}, 1, 1.0f);
  EXPECT_NE(test::message_of([&] { (void)gru_cell(x, x, random_tensor({2, 4}, 1, 1.0f)); })
                .find("the gates' inputs must be (batch, 3 units) = (2, 12)"),
            std::string::npos);
}
