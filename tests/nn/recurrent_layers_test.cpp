// SimpleRNN, LSTM and GRU: each against a direct loop over Keras' cell equations on the host
// (keras/src/layers/rnn/{simple_rnn,lstm,gru}.py), Keras' mask rule (a padded batch gives what the
// unpadded sequences give; a dropped step carries the states and repeats the previous output),
// go_backwards, return_sequences, the final states and initial states of run(), the orthogonal
// initializer, Keras' dropout masks (fixed over the steps, training only), and the options lockstep
// refuses, by name.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "common/error_message.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/tensor/kernel_launches.hpp"

using namespace lockstep;
using layers::RecurrentLayer;
using layers::RecurrentOptions;
using nlohmann::json;

namespace {
std::vector<float> random_values(std::int64_t n, std::uint64_t seed, float scale = 0.6f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// A layer built for [-1, -1, features] with random weights (biases too, so every weight matters).
std::shared_ptr<RecurrentLayer> built(const layers::LayerPtr& l, std::int64_t features, std::uint64_t seed = 1) {
  auto r = std::dynamic_pointer_cast<RecurrentLayer>(l);
  r->build(Shape{-1, -1, features}, 5);
  for (const auto& v : r->variables())
    v.assign(Tensor::from_vector(random_values(v.shape().numel(), seed++), v.shape()));
  return r;
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Keras' cells on the host, in double: the layer's output [b, (steps,) units] for x [b, steps, f]
// and keep [b][t] (Keras' backend rnn(): a dropped step keeps the states and the previous output).
std::vector<double> reference(const RecurrentLayer& l, const std::vector<float>& x, std::int64_t b, std::int64_t steps,
                              std::int64_t f, const std::vector<std::vector<bool>>& keep = {}) {
  const auto& o = l.options();
  const std::string cls = l.class_name();
  const std::int64_t u = o.units, g = cls == "LSTM" ? 4 : cls == "GRU" ? 3 : 1;
  const auto W = l.kernel().read_value().to_vector<float>(), R = l.recurrent_kernel().read_value().to_vector<float>();
  const auto B = l.bias().read_value().to_vector<float>();
  const bool two_biases = cls == "GRU" && o.reset_after;
  std::vector<double> out;
  std::vector<std::vector<double>> seq_out(static_cast<std::size_t>(b));
  for (std::int64_t n = 0; n < b; ++n) {
    std::vector<double> h(static_cast<std::size_t>(u), 0.0), c = h, prev = h;
    std::vector<double> per_step;
    for (std::int64_t i = 0; i < steps; ++i) {
      const std::int64_t t = o.go_backwards ? steps - 1 - i : i;
      std::vector<double> xz(static_cast<std::size_t>(g * u)), hz(static_cast<std::size_t>(g * u));
      for (std::int64_t j = 0; j < g * u; ++j) {
        double a = B[static_cast<std::size_t>(j)], r = two_biases ? B[static_cast<std::size_t>(g * u + j)] : 0.0;
        for (std::int64_t k = 0; k < f; ++k)
          a += x[static_cast<std::size_t>((n * steps + t) * f + k)] * W[static_cast<std::size_t>(k * g * u + j)];
        for (std::int64_t k = 0; k < u; ++k)
          r += h[static_cast<std::size_t>(k)] * R[static_cast<std::size_t>(k * g * u + j)];
        xz[static_cast<std::size_t>(j)] = a;
        hz[static_cast<std::size_t>(j)] = r;
      }
      const auto at = [u](const std::vector<double>& v, std::int64_t gate, std::int64_t j) {
        return v[static_cast<std::size_t>(gate * u + j)];
      };
      std::vector<double> nh(static_cast<std::size_t>(u)), nc = c;
      for (std::int64_t j = 0; j < u; ++j) {
        const auto J = static_cast<std::size_t>(j);
        if (cls == "SimpleRNN") {
          nh[J] = std::tanh(xz[J] + hz[J]);
        } else if (cls == "LSTM") {
          const double ig = sigmoid(at(xz, 0, j) + at(hz, 0, j)), fg = sigmoid(at(xz, 1, j) + at(hz, 1, j));
          const double og = sigmoid(at(xz, 3, j) + at(hz, 3, j));
          nc[J] = fg * c[J] + ig * std::tanh(at(xz, 2, j) + at(hz, 2, j));
          nh[J] = og * std::tanh(nc[J]);
        } else {
          const double z = sigmoid(at(xz, 0, j) + at(hz, 0, j)), r = sigmoid(at(xz, 1, j) + at(hz, 1, j));
          double rh;
          if (o.reset_after) {
            rh = r * at(hz, 2, j);
          } else {  // (r * h) · R_h
            rh = 0;
            for (std::int64_t k = 0; k < u; ++k) {
              const double rk = sigmoid(at(xz, 1, k) + at(hz, 1, k));
              rh += rk * h[static_cast<std::size_t>(k)] * R[static_cast<std::size_t>(k * g * u + 2 * u + j)];
            }
          }
          nh[J] = z * h[J] + (1 - z) * std::tanh(at(xz, 2, j) + rh);
        }
      }
      const bool kept = keep.empty() || keep[static_cast<std::size_t>(n)][static_cast<std::size_t>(t)];
      if (kept) {
        h = nh;
        c = nc;
        prev = nh;
      } else if (o.zero_output_for_mask) {
        prev.assign(static_cast<std::size_t>(u), 0.0);
      }
      per_step.insert(per_step.end(), prev.begin(), prev.end());
    }
    if (o.return_sequences) {
      out.insert(out.end(), per_step.begin(), per_step.end());
    } else {
      out.insert(out.end(), prev.begin(), prev.end());
    }
  }
  return out;
}

void expect_near(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  const auto g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << what << " [" << i << "]";
}

struct Case {
  const char* name;
  layers::LayerPtr layer;
};
std::vector<Case> every_layer(bool return_sequences, bool go_backwards = false) {
  const auto o = [&](std::int64_t units) {
    return RecurrentOptions{.units = units, .return_sequences = return_sequences, .go_backwards = go_backwards};
  };
  RecurrentOptions before = o(3);
  before.reset_after = false;
  return {{"SimpleRNN", layers::SimpleRNN(o(4))},
          {"LSTM", layers::LSTM(o(3))},
          {"GRU", layers::GRU(o(3))},
          {"GRU(reset_after=False)", layers::GRU(before)}};
}

constexpr std::int64_t kB = 3, kT = 5, kF = 2;
}  // namespace

TEST(RecurrentLayers, EachComputesKerasCellEquations) {
  const auto x = random_values(kB * kT * kF, 42, 1.0f);
  for (bool seqs : {false, true})
    for (bool back : {false, true})
      for (const auto& c : every_layer(seqs, back)) {
        const auto l = built(c.layer, kF);
        const Tensor y = l->call(Tensor::from_vector(x, {kB, kT, kF}), {});
        EXPECT_EQ(y.shape(), seqs ? Shape({kB, kT, l->options().units}) : Shape({kB, l->options().units})) << c.name;
        expect_near(y, reference(*l, x, kB, kT, kF), 1e-5,
                    std::string(c.name) + (seqs ? " return_sequences" : "") + (back ? " go_backwards" : ""));
      }
}

// Keras' mask rule, with padding at the end, at the start and in the middle of rows.
TEST(RecurrentLayers, AMaskedStepKeepsTheStatesAndRepeatsThePreviousOutput) {
  const auto x = random_values(kB * kT * kF, 43, 1.0f);
  const std::vector<std::vector<bool>> keep = {
      {true, true, true, false, false}, {false, false, true, true, true}, {true, false, true, false, true}};
  std::vector<float> m;
  for (const auto& row : keep)
    for (bool k : row) m.push_back(k ? 1.0f : 0.0f);
  const Tensor mask = Tensor::from_vector(m, {kB, kT});
  for (bool seqs : {false, true})
    for (bool back : {false, true})
      for (bool zero : {false, true})
        for (auto c : every_layer(seqs, back)) {
          auto o = std::dynamic_pointer_cast<RecurrentLayer>(c.layer)->options();
          o.zero_output_for_mask = zero;
          const std::string cls = c.layer->class_name();
          const auto l = built(cls == "LSTM"  ? layers::LSTM(o)
                               : cls == "GRU" ? layers::GRU(o)
                                              : layers::SimpleRNN(o),
                               kF);
          const Tensor y = l->call_masked(Tensor::from_vector(x, {kB, kT, kF}), mask, {});
          expect_near(y, reference(*l, x, kB, kT, kF, keep), 1e-5,
                      std::string(c.name) + (seqs ? " return_sequences" : "") + (back ? " go_backwards" : "") +
                          (zero ? " zero_output_for_mask" : ""));
          // Keras' RNN.compute_mask: the input's with return_sequences, else none.
          EXPECT_EQ(l->compute_mask(Tensor(), mask).defined(), seqs) << c.name;
        }
}

// The user's promise: with Embedding(mask_zero=True) in front, a padded batch gives each
// sequence's own result.
TEST(RecurrentLayers, APaddedBatchGivesWhatEachUnpaddedSequenceGives) {
  for (const auto& c : every_layer(false)) {
    auto emb = layers::Embedding(9, kF, true);
    emb->build(Shape{-1, -1}, 3);
    const auto l = built(c.layer, kF);
    const std::vector<std::vector<float>> rows = {{3, 1, 4}, {1, 5, 8, 2, 6}, {7}};
    std::vector<float> padded;
    for (const auto& r : rows) {
      padded.insert(padded.end(), r.begin(), r.end());
      padded.insert(padded.end(), static_cast<std::size_t>(kT) - r.size(), 0.0f);
    }
    const Tensor ids = Tensor::from_vector(padded, {kB, kT});
    const Tensor batch = l->call_masked(emb->call(ids, {}), emb->compute_mask(ids, Tensor()), {});
    const auto got = batch.to_vector<float>();
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto n = static_cast<std::int64_t>(rows[r].size());
      const auto alone = l->call(emb->call(Tensor::from_vector(rows[r], {1, n}), {}), {}).to_vector<float>();
      for (std::size_t j = 0; j < alone.size(); ++j)
        EXPECT_NEAR(got[r * alone.size() + j], alone[j], 1e-6) << c.name << " row " << r;
    }
  }
}

// Each step reads its rows of the input projection, of the mask and of LSTM's [h; c] as views
// (the projection is time-major): no gather per step forward and no scatter-add per step
// backward, so neither grows with the steps. (Keras' default activations: the fused cells. The
// composed cells, GRU(reset_after=False), gather each gate.)
TEST(RecurrentLayers, AStepReadsItsRowsWithoutAGatherForwardOrBackward) {
  const auto rows_moved = [](const std::shared_ptr<RecurrentLayer>& l, std::int64_t steps) {
    const Tensor x = Tensor::from_vector(random_values(kB * steps * kF, 45, 1.0f), {kB, steps, kF});
    std::vector<float> m(static_cast<std::size_t>(kB * steps), 1.0f);
    m[1] = 0.0f;  // one dropped step: the mask's where() per step
    const auto launches = [] {
      return detail::kernel_launches(Device{}, "gather_rows") + detail::kernel_launches(Device{}, "scatter_add_rows");
    };
    const std::uint64_t before = launches();
    GradientTape tape;
    tape.watch(x);
    const Tensor loss = sum(l->call_masked(x, Tensor::from_vector(m, {kB, steps}), {}));
    std::vector<Tensor> sources = {x};
    for (const auto& v : l->variables()) sources.push_back(v.value());
    const std::vector<Tensor> g = tape.gradient(loss, sources);
    for (const Tensor& t : g) EXPECT_TRUE(t.defined()) << l->class_name();
    return launches() - before;
  };
  for (const auto& c : every_layer(false)) {
    if (std::string(c.name) == "GRU(reset_after=False)") continue;
    const auto l = built(c.layer, kF);
    EXPECT_EQ(rows_moved(l, 12), rows_moved(l, 4)) << c.name;
  }
}

TEST(RecurrentLayers, RunGivesTheFinalStatesAndStartsFromInitialStates) {
  const auto x = random_values(kB * kT * kF, 44, 1.0f);
  const Tensor xt = Tensor::from_vector(x, {kB, kT, kF});
  for (const auto& c : every_layer(false)) {
    const auto l = built(c.layer, kF);
    const auto r = l->run(xt, Tensor(), {}, {});
    ASSERT_EQ(r.states.size(), c.layer->class_name() == "LSTM" ? 2u : 1u) << c.name;
    EXPECT_EQ(r.states[0].to_vector<float>(), r.output.to_vector<float>()) << c.name;  // h is the output
    // The last step's states as initial states of the first steps' run continue it: running the
    // 5 steps as 3 then 2 gives the 5 steps' result.
    std::vector<float> first, rest;
    for (std::int64_t n = 0; n < kB; ++n) {
      first.insert(first.end(), x.begin() + n * kT * kF, x.begin() + (n * kT + 3) * kF);
      rest.insert(rest.end(), x.begin() + (n * kT + 3) * kF, x.begin() + (n + 1) * kT * kF);
    }
    const auto head = l->run(Tensor::from_vector(first, {kB, 3, kF}), Tensor(), {}, {});
    const auto tail = l->run(Tensor::from_vector(rest, {kB, 2, kF}), Tensor(), head.states, {});
    const auto want = r.output.to_vector<float>(), got = tail.output.to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << c.name;
    EXPECT_NE(test::message_of([&] {
                (void)l->run(xt, Tensor(), {Tensor::zeros({kB, 7})}, {});
              }).find("initial state"),
              std::string::npos)
        << c.name;
  }
}

TEST(RecurrentLayers, WeightsHaveKerasShapesNamesAndInitialValues) {
  const auto lstm = std::dynamic_pointer_cast<RecurrentLayer>(layers::LSTM(3));
  lstm->build(Shape{-1, 4, 5}, 2);
  EXPECT_EQ(lstm->kernel().shape(), Shape({5, 12}));
  EXPECT_EQ(lstm->recurrent_kernel().shape(), Shape({3, 12}));
  EXPECT_EQ(lstm->bias().shape(), Shape({12}));
  EXPECT_EQ(lstm->variables()[1].name(), lstm->name() + "/recurrent_kernel");
  // unit_forget_bias: ones for the forget gate (i, f, c, o), zeros elsewhere.
  const auto b = lstm->bias().read_value().to_vector<float>();
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], i >= 3 && i < 6 ? 1.0f : 0.0f) << i;
  EXPECT_EQ(lstm->keras_weight_path(1), "cell/vars/1");
  const auto gru = std::dynamic_pointer_cast<RecurrentLayer>(layers::GRU(3));
  gru->build(Shape{-1, 4, 5}, 2);
  EXPECT_EQ(gru->bias().shape(), Shape({2, 9}));
  RecurrentOptions before{.units = 3};
  before.reset_after = false;
  const auto gru0 = std::dynamic_pointer_cast<RecurrentLayer>(layers::GRU(before));
  gru0->build(Shape{-1, 4, 5}, 2);
  EXPECT_EQ(gru0->bias().shape(), Shape({9}));
  const auto rnn = std::dynamic_pointer_cast<RecurrentLayer>(layers::SimpleRNN(6));
  rnn->build(Shape{-1, 4, 5}, 2);
  // The recurrent kernel is orthogonal: R^T R = I.
  const auto R = rnn->recurrent_kernel().read_value().to_vector<float>();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      double dot = 0;
      for (int k = 0; k < 6; ++k)
        dot += R[static_cast<std::size_t>(k * 6 + i)] * R[static_cast<std::size_t>(k * 6 + j)];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << "," << j;
    }
}

TEST(OrthogonalInitializer, GivesOrthonormalRowsOrColumnsDeterministicallyFromTheSeed) {
  const layers::Initializer init{"orthogonal"};
  for (const Shape& s : {Shape{7, 4}, Shape{4, 7}, Shape{2, 3, 5}}) {
    const auto q = init(s, 11).to_vector<float>();
    EXPECT_EQ(q, init(s, 11).to_vector<float>());
    EXPECT_NE(q, init(s, 12).to_vector<float>());
    const std::int64_t cols = s[-1], rows = s.numel() / cols;
    // The shorter side's vectors are orthonormal: columns where rows >= cols, else rows.
    const std::int64_t k = std::min(rows, cols), len = std::max(rows, cols);
    const auto el = [&](std::int64_t vec, std::int64_t i) {
      return rows >= cols ? q[static_cast<std::size_t>(i * cols + vec)] : q[static_cast<std::size_t>(vec * cols + i)];
    };
    for (std::int64_t a = 0; a < k; ++a)
      for (std::int64_t b = 0; b < k; ++b) {
        double dot = 0;
        for (std::int64_t i = 0; i < len; ++i) dot += el(a, i) * el(b, i);
        EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << s.str();
      }
  }
  EXPECT_NE(test::message_of([&] { (void)init(Shape{5}, 1); }).find("rank 2"), std::string::npos);
}

TEST(RecurrentLayers, OptionsLockstepDoesNotRunAreRefusedByName) {
  const json base = {{"name", "lstm"}, {"units", 3}};
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"stateful", true}, {"unroll", true}}) {
    json c = base;
    c[key] = value;
    for (const char* cls : {"SimpleRNN", "LSTM", "GRU"}) {
      const auto make = layers::find_layer_class(cls)->from_config;
      const std::string msg = test::message_of([&] { (void)make(c); });
      EXPECT_NE(msg.find(key), std::string::npos) << cls << ": " << msg;
      EXPECT_NE(msg.find("not supported"), std::string::npos) << cls << ": " << msg;
    }
    // Keras' "off" passes.
    c[key] = false;
    EXPECT_NO_THROW((void)layers::find_layer_class("LSTM")->from_config(c)) << key;
  }
  EXPECT_NE(test::message_of([] { (void)layers::LSTM(0); }).find("units"), std::string::npos);
  EXPECT_NE(
      test::message_of([] { (void)layers::LSTM({.units = 2, .dropout = 1.0f}); }).find("dropout must be in [0, 1)"),
      std::string::npos);
  EXPECT_NE(test::message_of([] {
              (void)layers::GRU({.units = 2, .recurrent_dropout = -0.1f});
            }).find("recurrent_dropout must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(test::message_of([] { (void)layers::GRU({.units = 2, .activation = "nope"}); }).find("nope"),
            std::string::npos);
  const auto l = built(layers::SimpleRNN(2), kF);
  EXPECT_NE(test::message_of([&] {
              (void)l->call(Tensor::zeros({2, 3, kF + 1}), {});
            }).find("was built for"),
            std::string::npos);
  EXPECT_NE(test::message_of([&] {
              (void)layers::SimpleRNN(2)->compute_output_shape(Shape{-1, 3});
            }).find("(batch, steps, features)"),
            std::string::npos);
}

TEST(RecurrentLayers, ConfigsRoundTripWithKerasKeys) {
  RecurrentOptions o{
      .units = 5, .activation = "relu", .use_bias = false, .return_sequences = true, .go_backwards = true};
  o.reset_after = false;
  o.name = "g";
  const auto gru = layers::GRU(o);
  const json c = gru->get_config();
  EXPECT_EQ(c.at("units"), 5);
  EXPECT_EQ(c.at("reset_after"), false);
  EXPECT_EQ(c.at("recurrent_initializer"), "orthogonal");
  EXPECT_EQ(c.at("recurrent_activation"), "sigmoid");
  EXPECT_EQ(layers::find_layer_class("GRU")->from_config(c)->get_config(), c);
  const json l = layers::LSTM(3)->get_config();
  EXPECT_EQ(l.at("unit_forget_bias"), true);
  EXPECT_FALSE(l.contains("reset_after"));
  EXPECT_FALSE(layers::SimpleRNN(3)->get_config().contains("recurrent_activation"));
}

// Keras' dropout masks are drawn once per call and fixed over the steps: a SimpleRNN with no
// recurrence (recurrent kernel and bias zero) given the same input at every step outputs the same
// at every step in training too, with some units' inputs dropped; in inference there is no dropout.
TEST(RecurrentLayers, DropoutMasksAreFixedOverTheStepsAndOnlyInTraining) {
  const auto l = built(layers::SimpleRNN({.units = 6, .return_sequences = true, .dropout = 0.5f}), 4);
  const auto plain = built(layers::SimpleRNN({.units = 6, .return_sequences = true}), 4);
  l->recurrent_kernel().assign(Tensor::zeros({6, 6}));
  l->bias().assign(Tensor::zeros({6}));
  plain->kernel().assign(l->kernel().read_value());
  plain->recurrent_kernel().assign(Tensor::zeros({6, 6}));
  plain->bias().assign(Tensor::zeros({6}));
  std::vector<float> x;
  const auto step = random_values(4, 9, 1.0f);
  for (int n = 0; n < 8 * kT; ++n) x.insert(x.end(), step.begin(), step.end());
  const Tensor xt = Tensor::from_vector(x, {8, kT, 4});
  const layers::CallContext train{.training = true, .seed = 3, .step = 1};
  const auto y = l->call(xt, train).to_vector<float>(), inference = l->call(xt, {}).to_vector<float>();
  EXPECT_EQ(inference, plain->call(xt, {}).to_vector<float>());
  std::size_t dropped_rows = 0;
  for (std::int64_t n = 0; n < 8; ++n) {
    bool differs = false;
    for (std::int64_t t = 1; t < kT; ++t)
      for (std::int64_t j = 0; j < 6; ++j) {
        const auto at = [&](std::int64_t s) { return static_cast<std::size_t>((n * kT + s) * 6 + j); };
        EXPECT_EQ(y[at(t)], y[at(0)]) << "row " << n << " step " << t;
        differs = differs || y[at(t)] != inference[at(t)];
      }
    dropped_rows += differs ? 1 : 0;
  }
  EXPECT_GE(dropped_rows, 6u);  // each row keeps all 4 inputs with probability 1/16
  // The same call again draws the same masks; the next step other ones.
  EXPECT_EQ(l->call(xt, train).to_vector<float>(), y);
  EXPECT_NE(l->call(xt, {.training = true, .seed = 3, .step = 2}).to_vector<float>(), y);
}

// recurrent_dropout (with dropout, Keras' implementation 1: a mask per gate) trains each layer;
// inference ignores it.
TEST(RecurrentLayers, RecurrentDropoutActsInTrainingOnly) {
  const auto x = random_values(kB * kT * kF, 45, 1.0f);
  const Tensor xt = Tensor::from_vector(x, {kB, kT, kF});
  for (auto c : every_layer(true)) {
    auto o = std::dynamic_pointer_cast<RecurrentLayer>(c.layer)->options();
    o.dropout = 0.3f;
    o.recurrent_dropout = 0.4f;
    const std::string cls = c.layer->class_name();
    const auto l = built(cls == "LSTM" ? layers::LSTM(o) : cls == "GRU" ? layers::GRU(o) : layers::SimpleRNN(o), kF);
    expect_near(l->call(xt, {}), reference(*l, x, kB, kT, kF), 1e-5, c.name);
    const layers::CallContext train{.training = true, .seed = 5, .step = 4};
    const auto y = l->call(xt, train).to_vector<float>();
    EXPECT_NE(y, l->call(xt, {}).to_vector<float>()) << c.name;
    EXPECT_EQ(y, l->call(xt, train).to_vector<float>()) << c.name;
    EXPECT_EQ(layers::find_layer_class(cls)->from_config(l->get_config())->get_config(), l->get_config()) << c.name;
  }
}

// Keras' seed (the dropout masks' own stream): two layers of the same seed draw the same masks
// whatever their build seeds (their weights made equal) and the model's seed; another seed other
// masks; the config keeps it (null when not given).
TEST(RecurrentLayers, ASeedIsTheDropoutMasksOwnStream) {
  const auto x = random_values(kB * kT * kF, 46, 1.0f);
  const Tensor xt = Tensor::from_vector(x, {kB, kT, kF});
  for (const std::string cls : {"SimpleRNN", "LSTM", "GRU"}) {
    const auto make = [&](std::optional<std::int64_t> seed, std::uint64_t build_seed) {
      RecurrentOptions o{.units = 4, .dropout = 0.3f, .recurrent_dropout = 0.4f};
      o.seed = seed;
      return built(cls == "LSTM" ? layers::LSTM(o) : cls == "GRU" ? layers::GRU(o) : layers::SimpleRNN(o), kF,
                   build_seed);
    };
    const auto a = make(42, 1), b = make(42, 2), other = make(43, 1);
    b->kernel().assign(a->kernel().value());
    b->recurrent_kernel().assign(a->recurrent_kernel().value());
    b->bias().assign(a->bias().value());
    const auto run = [&](const std::shared_ptr<RecurrentLayer>& l, std::uint64_t model_seed) {
      return l->call(xt, layers::CallContext{.training = true, .seed = model_seed, .step = 3}).to_vector<float>();
    };
    EXPECT_EQ(run(b, 12), run(a, 11)) << cls;
    EXPECT_NE(run(other, 11), run(a, 11)) << cls;
    EXPECT_EQ(a->get_config().at("seed"), 42) << cls;
    EXPECT_TRUE(make(std::nullopt, 1)->get_config().at("seed").is_null()) << cls;
    EXPECT_EQ(layers::find_layer_class(cls)->from_config(a->get_config())->get_config(), a->get_config()) << cls;
  }
}
