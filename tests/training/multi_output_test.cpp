// Layer calls that give several tensors (Keras' tensor_index): a recurrent layer's return_state,
// its initial_state in a Functional model (Keras' encoder-decoder), and MultiHeadAttention's
// return_attention_scores. The states are the last step's, the initial states are the ones run()
// takes, the gradient reaches an encoder through its states, the scores are the attention's
// probabilities under its masks, and an encoder-decoder model saves and loads as a .keras file
// (Keras' initial_state kwargs and keras_history tensor indices). Bidirectional(merge_mode=None):
// the forward layer's output and the backward layer's re-reversed one, both masked as Keras masks.
// A layer of one's own gives several tensors through Layer's virtuals (output_count and the rest).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/lockstep.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::same_bits;

Tensor sequence_input(std::int64_t n, std::int64_t steps, std::int64_t features, unsigned salt) {
  std::vector<float> v(static_cast<std::size_t>(n * steps * features));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt)) * 0.8f;
  return Tensor::from_vector(v, Shape{n, steps, features});
}

// x[:, t, :] of [batch, steps, units].
std::vector<float> step_of(const Tensor& x, std::int64_t t) {
  const auto v = x.to_vector<float>();
  const std::int64_t b = x.dim(0), steps = x.dim(1), u = x.dim(2);
  std::vector<float> out;
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t k = 0; k < u; ++k) out.push_back(v[static_cast<std::size_t>((i * steps + t) * u + k)]);
  return out;
}

std::vector<layers::LayerPtr> each_recurrent(const layers::RecurrentOptions& o) {
  return {layers::SimpleRNN(o), layers::LSTM(o), layers::GRU(o)};
}

TEST(MultiOutput, ReturnStateGivesTheLastStepsStatesInKerasOrder) {
  const Tensor x = sequence_input(3, 5, 2, 1);
  for (bool sequences : {true, false})
    for (const auto& layer : each_recurrent({.units = 4, .return_sequences = sequences, .return_state = true})) {
      const KerasTensor in = Input({5, 2});
      const std::vector<KerasTensor> outs = call_outputs(layer, in);
      const auto& rnn = dynamic_cast<const layers::RecurrentLayer&>(*layer);
      ASSERT_EQ(outs.size(), 1u + static_cast<std::size_t>(rnn.state_count())) << layer->class_name();
      EXPECT_EQ(outs[1].index(), 1);
      EXPECT_EQ(outs[1].shape(), (Shape{-1, 4}));
      Functional model(in, outs);
      const std::vector<Tensor> got = model.predict(std::vector<Tensor>{x});
      ASSERT_EQ(got.size(), outs.size());
      // h is the last step's output (return_sequences) or the output itself.
      const std::vector<float> last = sequences ? step_of(got[0], 4) : got[0].to_vector<float>();
      EXPECT_EQ(last, got[1].to_vector<float>()) << layer->class_name();
      // and every state is run()'s.
      const layers::RecurrentResult r = rnn.run(x, Tensor(), {}, layers::CallContext{});
      for (std::size_t s = 0; s < r.states.size(); ++s)
        EXPECT_TRUE(same_bits(r.states[s], got[1 + s])) << layer->class_name() << " state " << s;
      // The model's output structure names the states after their layer.
      EXPECT_EQ(model.output_structure().names[1], layer->name() + "_1");
    }
}

TEST(MultiOutput, AMultiOutputCallIsRefusedByCallAndBySequentialNamingWhatToUse) {
  const KerasTensor in = Input({5, 2});
  const auto lstm = layers::LSTM({.units = 3, .return_state = true});
  std::string msg = test::message_of([&] { (void)call(lstm, in); });
  EXPECT_NE(msg.find("gives 3 tensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("call_outputs"), std::string::npos) << msg;
  msg = test::message_of([&] { Sequential({layers::Input({5, 2}), layers::GRU({.units = 3, .return_state = true})}); });
  EXPECT_NE(msg.find("return_state=True"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Functional"), std::string::npos) << msg;
  EXPECT_NE(msg.find("its layer 1 (GRU)"), std::string::npos) << msg;  // not yet named: its place
  EXPECT_NE(msg.find("keras.Model(inputs, outputs)"), std::string::npos) << msg;
  // initial_state and return_attention_scores belong to the layers that take them.
  const std::vector<KerasTensor> states{call(layers::Dense(3), call(layers::Flatten(), in))};
  msg = test::message_of([&] { (void)call(layers::Dense(3), in, {.initial_state = &states}); });
  EXPECT_NE(msg.find("takes no initial_state"), std::string::npos) << msg;
  msg = test::message_of([&] { (void)call(layers::LSTM(3), in, {.initial_state = &states}); });
  EXPECT_NE(msg.find("has 2 state(s)"), std::string::npos) << msg;
  const std::vector<KerasTensor> wide{call(layers::Dense(4), call(layers::Flatten(), in))};
  msg = test::message_of([&] { (void)call(layers::GRU(3), in, {.initial_state = &wide}); });
  EXPECT_NE(msg.find("(batch, units)"), std::string::npos) << msg;
  msg = test::message_of([&] { (void)call(layers::Dense(3), in, {.return_attention_scores = true}); });
  EXPECT_NE(msg.find("takes no return_attention_scores"), std::string::npos) << msg;
}

TEST(MultiOutput, InitialStateIsTheStateRunStartsFrom) {
  const Tensor x = sequence_input(3, 5, 2, 2);
  const Tensor h0 = Tensor::from_vector(std::vector<float>{0.5f, -0.2f, 0.1f, 0.9f, -0.7f, 0.3f, 0.0f, 0.4f, -0.1f},
                                        Shape{3, 3});
  const Tensor c0 = mul(h0, Tensor::full(Shape{}, -1.5f));
  for (const auto& layer : each_recurrent({.units = 3, .return_sequences = true})) {
    const auto& rnn = dynamic_cast<const layers::RecurrentLayer&>(*layer);
    const KerasTensor in = Input({5, 2}), h = Input({3}), c = Input({3});
    const bool lstm = rnn.state_count() == 2;
    const std::vector<KerasTensor> states = lstm ? std::vector<KerasTensor>{h, c} : std::vector<KerasTensor>{h};
    const KerasTensor y = call(layer, in, {.initial_state = &states});
    Functional model(lstm ? std::vector<KerasTensor>{in, h, c} : std::vector<KerasTensor>{in, h}, y);
    const std::vector<Tensor> given = lstm ? std::vector<Tensor>{h0, c0} : std::vector<Tensor>{h0};
    const std::vector<Tensor> xs = lstm ? std::vector<Tensor>{x, h0, c0} : std::vector<Tensor>{x, h0};
    const Tensor got = model.predict(xs).front();
    EXPECT_TRUE(same_bits(got, rnn.run(x, Tensor(), given, layers::CallContext{}).output)) << layer->class_name();
    EXPECT_FALSE(same_bits(got, rnn.run(x, Tensor(), {}, layers::CallContext{}).output)) << layer->class_name();
  }
}

// Keras' seq2seq example: the encoder's final states start the decoder.
struct EncoderDecoder {
  KerasTensor encoder_inputs = Input({6, 2}, "encoder_inputs");
  KerasTensor decoder_inputs = Input({4, 1}, "decoder_inputs");
  layers::LayerPtr encoder = layers::LSTM({.units = 8, .return_state = true, .name = "encoder"});
  std::unique_ptr<Functional> model;
  EncoderDecoder() {
    const auto enc = call_outputs(encoder, encoder_inputs);
    const std::vector<KerasTensor> states{enc[1], enc[2]};
    const KerasTensor y =
        call(layers::LSTM({.units = 8, .return_sequences = true, .name = "decoder"}), decoder_inputs, {.initial_state = &states});
    model = std::make_unique<Functional>(std::vector<KerasTensor>{encoder_inputs, decoder_inputs},
                                         call(layers::Dense(1), y), "seq2seq", 7);
    model->compile(optimizers::Adam(2e-2), losses::MeanSquaredError());
  }
};

TEST(MultiOutput, AnEncoderDecoderTrainsTheEncoderThroughItsStates) {
  EncoderDecoder s2s;
  const std::int64_t n = 64;
  const Tensor enc = sequence_input(n, 6, 2, 3);
  const Tensor dec = Tensor::zeros(Shape{n, 4, 1});
  // The target is the encoder input's mean over time per feature 0, at every decoder step: only
  // the states carry it (the decoder's own input is zeros).
  const auto e = enc.to_vector<float>();
  std::vector<float> y;
  for (std::int64_t i = 0; i < n; ++i) {
    float m = 0;
    for (std::int64_t t = 0; t < 6; ++t) m += e[static_cast<std::size_t>((i * 6 + t) * 2)] / 6.0f;
    for (int t = 0; t < 4; ++t) y.push_back(m);
  }
  const Tensor target = Tensor::from_vector(y, Shape{n, 4, 1});
  const std::vector<float> kernel_before = s2s.encoder->variables()[0].read_value().to_vector<float>();
  const History h = s2s.model->fit({enc, dec}, {target}, {.epochs = 30, .batch_size = 16, .verbose = 0});
  // Only the decoder's loss reaches the encoder, and only through its states.
  EXPECT_NE(kernel_before, s2s.encoder->variables()[0].read_value().to_vector<float>());
  const auto& loss = h.history.at("loss");
  EXPECT_LT(loss.back(), 0.2 * loss.front()) << loss.front() << " -> " << loss.back();
}

TEST(MultiOutput, AnEncoderDecoderSavesAndLoadsAsAKerasFile) {
  EncoderDecoder s2s;
  const Tensor enc = sequence_input(5, 6, 2, 4), dec = sequence_input(5, 4, 1, 5);
  const std::string path = test::fresh_test_dir("multi_output", "seq2seq") + ".keras";
  std::filesystem::remove(path);
  save_model(*s2s.model, path);
  const auto loaded = load_model(path);
  EXPECT_TRUE(same_bits(s2s.model->predict({enc, dec}).front(), loaded->predict({enc, dec}).front()));
  // Keras' form: the decoder's call takes initial_state=[encoder[0][1], encoder[0][2]].
  const auto entries = io::decode_zip(io::read_file(path), path);
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  json decoder;
  for (const auto& l : config["config"]["layers"])
    if (l["config"]["name"] == "decoder") decoder = l;
  const json& states = decoder["inbound_nodes"][0]["kwargs"]["initial_state"];
  ASSERT_EQ(states.size(), 2u) << decoder.dump();
  EXPECT_EQ(states[0]["config"]["keras_history"], json::array({"encoder", 0, 1}));
  EXPECT_EQ(states[1]["config"]["keras_history"], json::array({"encoder", 0, 2}));
  EXPECT_EQ(decoder["build_config"]["shapes_dict"]["initial_state_shape"], json::parse("[[null, 8], [null, 8]]"));

  // A hostile file: a tensor index the encoder does not give is refused by name.
  auto bad_entries = entries;
  for (auto& e : bad_entries)
    if (e.name == "config.json") {
      json c = json::parse(e.bytes);
      for (auto& l : c["config"]["layers"])
        if (l["config"]["name"] == "decoder") l["inbound_nodes"][0]["kwargs"]["initial_state"][1]["config"]["keras_history"][2] = 3;
      e.bytes = c.dump();
    }
  const std::string bad = path + ".bad.keras";
  io::write_file_atomic(bad, io::encode_zip(bad_entries));
  const std::string msg = test::io_message_of([&] { (void)load_model(bad); });
  EXPECT_NE(msg.find("tensor index"), std::string::npos) << msg;
  EXPECT_NE(msg.find("decoder"), std::string::npos) << msg;
}

TEST(MultiOutput, AttentionScoresAreTheProbabilitiesUnderTheMasksAndLeaveTheOutputAlone) {
  const auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 3});
  const KerasTensor q = Input({4, 5}), v = Input({4, 5});
  const auto outs = call_outputs(mha, {q, v}, {.use_causal_mask = true, .return_attention_scores = true});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].shape(), (Shape{-1, 2, 4, 4}));
  Functional with_scores({q, v}, outs);
  Functional without({q, v}, call(mha, {q, v}, {.use_causal_mask = true}));  // the same layer: the same weights
  const Tensor xq = sequence_input(3, 4, 5, 6), xv = sequence_input(3, 4, 5, 7);
  const std::vector<Tensor> got = with_scores.predict({xq, xv});
  const Tensor plain = without.predict({xq, xv}).front();
  const auto a = got[0].to_vector<float>(), b = plain.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
  const auto s = got[1].to_vector<float>();
  ASSERT_EQ(got[1].shape(), (Shape{3, 2, 4, 4}));
  for (std::size_t row = 0; row < s.size() / 4; ++row) {
    const std::size_t query = row % 4;
    float sum = 0;
    for (std::size_t key = 0; key < 4; ++key) {
      sum += s[row * 4 + key];
      if (key > query) {
        EXPECT_EQ(s[row * 4 + key], 0.0f) << "row " << row << " key " << key;  // causal
      } else {
        EXPECT_GT(s[row * 4 + key], 0.0f);
      }
    }
    EXPECT_NEAR(sum, 1.0f, 1e-5) << row;
  }
}

TEST(MultiOutput, AttentionScoresRespectAnAttentionMaskAndSaveAndLoad) {
  const auto mha = layers::MultiHeadAttention({.num_heads = 1, .key_dim = 2, .name = "mha"});
  const KerasTensor q = Input({3, 4}), v = Input({5, 4}), m = Input({3, 5});
  const auto outs = call_outputs(mha, {q, v}, {.attention_mask = &m, .return_attention_scores = true});
  Functional model({q, v, m}, outs, "scores");
  std::vector<float> mv(3 * 3 * 5);
  for (std::size_t i = 0; i < mv.size(); ++i) mv[i] = (i * 7) % 3 == 0 ? 0.0f : 1.0f;
  const Tensor xm = Tensor::from_vector(mv, Shape{3, 3, 5});
  const std::vector<Tensor> xs{sequence_input(3, 3, 4, 8), sequence_input(3, 5, 4, 9), xm};
  const std::vector<Tensor> got = model.predict(xs);
  const auto s = got[1].to_vector<float>();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (mv[i] == 0.0f) {
      EXPECT_EQ(s[i], 0.0f) << i;
    }
  }
  EXPECT_EQ(model.output_structure().names, (std::vector<std::string>{"mha", "mha_1"}));
  const std::string path = test::fresh_test_dir("multi_output", "scores") + ".keras";
  std::filesystem::remove(path);
  save_model(model, path);
  const std::vector<Tensor> again = load_model(path)->predict(xs);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_TRUE(same_bits(got[0], again[0]));
  EXPECT_TRUE(same_bits(got[1], again[1]));
}

// A model called on symbolic tensors replays its calls, states and scores included.
TEST(MultiOutput, AnEncoderDecoderCalledAsALayerComputesWhatItDoes) {
  EncoderDecoder s2s;
  const KerasTensor a = Input({6, 2}), b = Input({4, 1});
  Functional outer({a, b}, call(*s2s.model, {a, b}).front());
  const std::vector<Tensor> xs{sequence_input(2, 6, 2, 10), sequence_input(2, 4, 1, 11)};
  EXPECT_TRUE(same_bits(s2s.model->predict(xs).front(), outer.predict(xs).front()));
}

// Bidirectional(merge_mode=None) over Masking: rows 1 and 2 end in masked steps.
struct UnmergedBidirectional {
  std::shared_ptr<layers::BidirectionalLayer> bi;
  KerasTensor in = Input({5, 2});
  std::unique_ptr<Functional> model;
  explicit UnmergedBidirectional(bool sequences) {
    bi = std::make_shared<layers::BidirectionalLayer>(layers::LSTM({.units = 4, .return_sequences = sequences}),
                                                      std::nullopt, nullptr, "bi");
    model = std::make_unique<Functional>(in, call_outputs(bi, call(layers::Masking(0.0f), in)), "unmerged", 5);
  }
  static Tensor input(std::int64_t n, unsigned salt) {
    std::vector<float> v = sequence_input(n, 5, 2, salt).to_vector<float>();
    for (std::int64_t b = 1; b < n; b += 3)
      for (std::size_t k = 6; k < 10; ++k) v[static_cast<std::size_t>(b) * 10 + k] = 0.0f;  // steps 3 and 4
    for (std::int64_t b = 2; b < n; b += 3)
      for (std::size_t k = 8; k < 10; ++k) v[static_cast<std::size_t>(b) * 10 + k] = 0.0f;  // step 4
    return Tensor::from_vector(v, Shape{n, 5, 2});
  }
};

TEST(MultiOutput, BidirectionalMergeModeNoneGivesTheForwardAndTheReReversedBackwardOutputs) {
  const Tensor x = UnmergedBidirectional::input(3, 12);
  for (bool sequences : {true, false}) {
    UnmergedBidirectional u(sequences);
    const std::vector<KerasTensor> outs = call_outputs(u.bi, Input({5, 2}));  // a second call, shapes only
    ASSERT_EQ(outs.size(), 2u);
    const Shape want = sequences ? Shape{-1, 5, 4} : Shape{-1, 4};
    EXPECT_EQ(outs[0].shape(), want);
    EXPECT_EQ(outs[1].shape(), want);
    EXPECT_EQ(outs[1].index(), 1);
    const std::vector<Model::Output> got = u.model->forward_all(std::vector<Tensor>{x}, {});
    ASSERT_EQ(got.size(), 2u);
    const Tensor mask = layers::MaskingLayer(0.0f).compute_mask(x, Tensor());
    const layers::CallContext ctx{};
    const Tensor forward = u.bi->forward_layer().run(x, mask, {}, ctx).output;
    const Tensor backward = u.bi->backward_layer().run(x, mask, {}, ctx).output;
    EXPECT_TRUE(same_bits(got[0].output, forward)) << sequences;
    if (sequences) {
      // The backward layer's step t is output step 4 - t (Keras' ops.flip on axis 1).
      for (std::int64_t t = 0; t < 5; ++t) EXPECT_EQ(step_of(got[1].output, t), step_of(backward, 4 - t)) << t;
      EXPECT_NE(step_of(got[1].output, 0), step_of(backward, 0));
    } else {
      EXPECT_TRUE(same_bits(got[1].output, backward));
    }
    // Keras' compute_mask: [mask, mask] with return_sequences, [None, None] otherwise.
    EXPECT_EQ(got[0].mask.defined(), sequences);
    EXPECT_EQ(got[1].mask.defined(), sequences);
    if (sequences) {
      EXPECT_TRUE(same_bits(got[0].mask, mask));
      EXPECT_TRUE(same_bits(got[1].mask, mask));
    }
    EXPECT_EQ(u.model->output_structure().names, (std::vector<std::string>{"bi", "bi_1"}));
    // Keras' summary shows the call's shapes as a list.
    const std::string summary = u.model->summary();
    const std::string shapes = sequences ? "[(None, 5, 4), (None, 5, 4)]" : "[(None, 4), (None, 4)]";
    EXPECT_NE(summary.find(" bi (Bidirectional)          " + shapes + " "), std::string::npos) << summary;
  }
}

TEST(MultiOutput, BidirectionalMergeModeNoneTrainsWithALossPerDirection) {
  UnmergedBidirectional u(true);
  u.model->compile(optimizers::Adam(2e-2),
                   {{"bi", losses::MeanSquaredError()}, {"bi_1", losses::MeanAbsoluteError()}}, {});
  const std::int64_t n = 48;
  const Tensor x = UnmergedBidirectional::input(n, 13);
  // Targets each direction can reach: the running sum of feature 0 forward, and of feature 1
  // backward (from the last step), squashed.
  const auto xv = x.to_vector<float>();
  std::vector<float> fwd, bwd;
  for (std::int64_t b = 0; b < n; ++b) {
    std::vector<float> f(5), r(5);
    float acc = 0;
    for (std::int64_t t = 0; t < 5; ++t) f[static_cast<std::size_t>(t)] = std::tanh(acc += xv[static_cast<std::size_t>((b * 5 + t) * 2)]);
    acc = 0;
    for (std::int64_t t = 4; t >= 0; --t) r[static_cast<std::size_t>(t)] = std::tanh(acc += xv[static_cast<std::size_t>((b * 5 + t) * 2 + 1)]);
    for (std::int64_t t = 0; t < 5; ++t)
      for (int k = 0; k < 4; ++k) {
        fwd.push_back(f[static_cast<std::size_t>(t)]);
        bwd.push_back(r[static_cast<std::size_t>(t)]);
      }
  }
  const std::vector<float> forward_kernel = u.bi->forward_layer().kernel().read_value().to_vector<float>();
  const std::vector<float> backward_kernel = u.bi->backward_layer().kernel().read_value().to_vector<float>();
  const History h = u.model->fit({x}, {Tensor::from_vector(fwd, Shape{n, 5, 4}), Tensor::from_vector(bwd, Shape{n, 5, 4})},
                                 {.epochs = 25, .batch_size = 16, .verbose = 0});
  EXPECT_NE(forward_kernel, u.bi->forward_layer().kernel().read_value().to_vector<float>());
  EXPECT_NE(backward_kernel, u.bi->backward_layer().kernel().read_value().to_vector<float>());
  for (const char* key : {"bi_loss", "bi_1_loss"}) {
    ASSERT_TRUE(h.history.contains(key)) << key;
    const auto& loss = h.history.at(key);
    EXPECT_LT(loss.back(), 0.5 * loss.front()) << key << ": " << loss.front() << " -> " << loss.back();
  }
}

TEST(MultiOutput, BidirectionalMergeModeNoneSavesAndLoadsAsAKerasFile) {
  UnmergedBidirectional u(true);
  const Tensor x = UnmergedBidirectional::input(4, 14);
  const std::string path = test::fresh_test_dir("multi_output", "unmerged") + ".keras";
  std::filesystem::remove(path);
  save_model(*u.model, path);
  const auto loaded = load_model(path);
  const std::vector<Tensor> want = u.model->predict(std::vector<Tensor>{x}), got = loaded->predict(std::vector<Tensor>{x});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(same_bits(want[0], got[0]));
  EXPECT_TRUE(same_bits(want[1], got[1]));
  // Keras' form: merge_mode null, the outputs the call's tensors 0 and 1.
  const auto entries = io::decode_zip(io::read_file(path), path);
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  EXPECT_EQ(config["config"]["output_layers"], json::parse(R"([["bi", 0, 0], ["bi", 0, 1]])"));
  for (const auto& l : config["config"]["layers"])
    if (l["config"]["name"] == "bi") {
      EXPECT_TRUE(l["config"]["merge_mode"].is_null()) << l.dump();
    }
}

TEST(MultiOutput, BidirectionalMergeModeNoneIsRefusedByCallAndBySequentialNamingWhatToUse) {
  const auto bi = layers::Bidirectional(layers::GRU(3, true), std::nullopt);
  std::string msg = test::message_of([&] { (void)call(bi, Input({5, 2})); });
  EXPECT_NE(msg.find("gives 2 tensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("call_outputs"), std::string::npos) << msg;
  msg = test::message_of([&] { Sequential({layers::Input({5, 2}), bi}); });
  EXPECT_NE(msg.find("merge_mode=None"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Functional"), std::string::npos) << msg;
  // A direct call has no one tensor to give either.
  const auto built = std::make_shared<layers::BidirectionalLayer>(layers::GRU(3, true), std::nullopt, nullptr, "b");
  built->build(Shape{-1, 5, 2}, 1);
  msg = test::message_of([&] { (void)built->call(sequence_input(2, 5, 2, 15), layers::CallContext{}); });
  EXPECT_NE(msg.find("call_outputs"), std::string::npos) << msg;
}

// A layer of one's own whose calls give two tensors, x and -x, the second with the first's mask:
// it says so through Layer's virtuals alone, which lockstep::call_outputs, Functional, call and
// Sequential all read.
class SignPair final : public layers::Layer {
 public:
  std::string class_name() const override { return "SignPair"; }
  bool supports_masking() const override { return true; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext&) const override { return x; }
  std::size_t output_count(const layers::CallOptions&) const override { return 2; }
  std::string describe_outputs(const layers::CallOptions&) const override { return "x and -x"; }
  std::vector<Shape> more_output_shapes(const std::vector<Shape>& inputs, const layers::CallOptions&) const override {
    return {inputs.front()};
  }
  Tensor more_outputs_mask(const Tensor& output_mask) const override { return output_mask; }
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const layers::CallArguments&,
                                   const layers::CallContext&) const override {
    return {inputs.front(), neg(inputs.front())};
  }
};

TEST(MultiOutput, ALayerOfItsOwnGivesSeveralTensorsThroughLayersVirtuals) {
  const KerasTensor in = Input({5, 2});
  const auto pair = std::make_shared<SignPair>();
  const std::vector<KerasTensor> outs = call_outputs(pair, call(layers::Masking(0.0f), in));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].index(), 1);
  EXPECT_EQ(outs[1].shape(), (Shape{-1, 5, 2}));
  Functional model(in, outs, "pair");
  const Tensor x = UnmergedBidirectional::input(3, 16);  // rows 1 and 2 end in masked steps
  const std::vector<Model::Output> got = model.forward_all(std::vector<Tensor>{x}, {});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(same_bits(got[0].output, x));
  EXPECT_TRUE(same_bits(got[1].output, neg(x)));
  const Tensor mask = layers::MaskingLayer(0.0f).compute_mask(x, Tensor());
  ASSERT_TRUE(got[1].mask.defined());
  EXPECT_TRUE(same_bits(got[1].mask, mask));
  std::string msg = test::message_of([&] { (void)call(pair, in); });
  EXPECT_NE(msg.find("gives 2 tensors here, x and -x"), std::string::npos) << msg;
  msg = test::message_of([&] { Sequential({layers::Input({5, 2}), std::make_shared<SignPair>()}); });
  EXPECT_NE(msg.find("its layer 1 (SignPair) gives 2 tensors, x and -x"), std::string::npos) << msg;
}

// A layer of one's own whose call takes Keras' initial_state (one tensor of its input's shape,
// added to x): it says so through Layer::check_call_arguments alone, which lockstep::call asks.
class Offset final : public layers::Layer {
 public:
  std::string class_name() const override { return "Offset"; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext&) const override { return x; }
  void check_call_arguments(const layers::CallSignature& call) const override {
    refuse_other_arguments(call, {.initial_state = true});
    if (call.initial_state && !(call.initial_state->size() == 1 && call.initial_state->front() == call.inputs.front()))
      throw ValueError("layer '" + name() + "' (Offset) takes one initial state of its input's shape");
  }
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const layers::CallArguments& args,
                                   const layers::CallContext&) const override {
    return {args.initial_state.empty() ? inputs.front() : add(inputs.front(), args.initial_state.front())};
  }
};

TEST(MultiOutput, ALayerOfItsOwnTakesAKeywordArgumentThroughCheckCallArguments) {
  const KerasTensor x = Input({3}, "x"), h = Input({3}, "h");
  const std::vector<KerasTensor> state{h};
  Functional model(std::vector<KerasTensor>{x, h}, call(std::make_shared<Offset>(), x, {.initial_state = &state}),
                   "offset");
  const Tensor xt = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor ht = Tensor::from_vector<float>({10, 20, 30, 40, 50, 60}, Shape{2, 3});
  EXPECT_EQ(model.predict({xt, ht})[0].to_vector<float>(), (std::vector<float>{11, 22, 33, 44, 55, 66}));
  // Its own check, named by the call; the arguments it does not take, refused as by any layer.
  const KerasTensor wide = Input({4});
  const std::vector<KerasTensor> wrong{wide};
  std::string msg = test::message_of([&] { (void)call(std::make_shared<Offset>(), x, {.initial_state = &wrong}); });
  EXPECT_NE(msg.find("lockstep::call: layer 'offset' (Offset) takes one initial state of its input's shape"),
            std::string::npos) << msg;
  msg = test::message_of([&] { (void)call(std::make_shared<Offset>(), x, {.use_causal_mask = true}); });
  EXPECT_NE(msg.find("layer 'offset' (Offset) takes no use_causal_mask (MultiHeadAttention does)"), std::string::npos)
      << msg;
  msg = test::message_of([&] { (void)call(layers::Dense(3), x, {.initial_state = &state}); });
  EXPECT_NE(msg.find("layer 'dense' (Dense) takes no initial_state (SimpleRNN, LSTM and GRU do)"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace lockstep
