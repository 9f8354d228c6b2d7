// A Functional model using every layer of issue 40's layer set (Embedding, Dense on rank 3 with
// gelu / silu, Permute, Softmax, GlobalAveragePooling1D, RepeatVector, the merge layers): it
// trains through fit, and saves and loads, bit for bit, in lockstep's folder format and as .keras.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/lockstep.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::same_bits;

constexpr std::int64_t kVocab = 11, kSteps = 5;

std::unique_ptr<Functional> sequence_model() {
  const KerasTensor in = Input({kSteps});
  KerasTensor x = call(layers::Embedding(kVocab, 6), in);                     // [b, 5, 6]
  x = call(layers::Dense(6, "gelu"), x);                                      // rank 3
  x = call(layers::Permute({2, 1}), x);                                       // [b, 6, 5]
  x = call(layers::Softmax(1), x);
  x = call(layers::Permute({2, 1}), x);                                       // [b, 5, 6]
  const KerasTensor pooled = call(layers::GlobalAveragePooling1D(), x);       // [b, 6]
  const KerasTensor a = call(layers::Dense(4, "silu"), pooled);
  const KerasTensor b = call(layers::Dense(4, "swish"), pooled);
  std::vector<KerasTensor> merged = {call(layers::Multiply(), {a, b}), call(layers::Subtract(), {a, b}),
                                     call(layers::Average(), {a, b}), call(layers::Maximum(), {a, b}),
                                     call(layers::Minimum(), {a, b}), call(layers::Dot(1, true), {a, b})};
  KerasTensor cat = call(layers::Concatenate(), merged);                      // [b, 21]
  KerasTensor seq = call(layers::RepeatVector(2), cat);                       // [b, 2, 21]
  seq = call(layers::Dot(2), {seq, seq});                                     // [b, 2, 2]
  const KerasTensor flat = call(layers::Flatten(), seq);
  const KerasTensor out = call(layers::Dense(3, "softmax"), call(layers::Concatenate(), {flat, cat}));
  auto m = std::make_unique<Functional>(in, out, "sequence_model", 7);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// Token indices as the floats a model's input is, in [0, kVocab).
Tensor tokens(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n * kSteps));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + 3) % kVocab);
  return Tensor::from_vector(v, {n, kSteps});
}

TEST(SequenceModel, TrainsThroughFitAndTheEmbeddingTableLearns) {
  auto model = sequence_model();
  const Tensor x = tokens(48), y = test::labels(48, 3);
  const auto& emb = dynamic_cast<const layers::EmbeddingLayer&>(*model->layers()[1]);
  EXPECT_EQ(emb.embeddings().name(), "embedding/embeddings");
  const auto before = emb.embeddings().read_value().to_vector<float>();
  const auto history = model->fit(x, y, {.epochs = 6, .batch_size = 8, .verbose = 0});
  const auto& loss = history.history.at("loss");
  EXPECT_LT(loss.back(), loss.front());
  EXPECT_NE(emb.embeddings().read_value().to_vector<float>(), before);
}

// Under mixed_float16 (float16 compute, float32 variables) the same weights give float32's
// outputs and gradients to float16's precision, and gradients reach the variables as float32.
TEST(SequenceModel, UnderMixedFloat16ComputesWhatFloat32Does) {
  auto reference = sequence_model();
  std::unique_ptr<Functional> mixed;
  {
    struct Guard {
      Guard() { mixed_precision::set_global_policy("mixed_float16"); }
      ~Guard() { mixed_precision::set_global_policy("float32"); }
    } guard;
    mixed = sequence_model();
  }
  const Tensor x = tokens(8), y = test::labels(8, 3);
  const layers::CallContext ctx{.training = true, .seed = 1};
  auto grads = [&](Functional& m, Tensor* out) {
    GradientTape tape;
    const Model::Output o = m.forward(x, ctx);
    *out = o.output;
    return tape.gradient(mean(m.loss()->per_example(y, o.output, o.logits)), m.trainable_variables());
  };
  Tensor ref_out, mixed_out;
  const auto ref_grads = grads(*reference, &ref_out);
  const auto mixed_grads = grads(*mixed, &mixed_out);
  const auto a = ref_out.to_vector<float>(), b = mixed_out.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-2) << "output " << i;
  ASSERT_EQ(ref_grads.size(), mixed_grads.size());
  for (std::size_t v = 0; v < ref_grads.size(); ++v) {
    EXPECT_EQ(mixed_grads[v].dtype(), DType::kF32);
    const auto ga = ref_grads[v].to_vector<float>(), gb = mixed_grads[v].to_vector<float>();
    double scale = 1e-3;
    for (float g : ga) scale = std::max(scale, static_cast<double>(std::abs(g)));
    for (std::size_t i = 0; i < ga.size(); ++i)
      ASSERT_NEAR(ga[i], gb[i], 2e-2 * scale) << mixed->trainable_variables()[v].name() << "[" << i << "]";
  }
}

void expect_same_model(Model& a, Model& b) {
  test::expect_same_variables(a, b);
  const Tensor x = tokens(5);
  EXPECT_TRUE(same_bits(a.predict(x), b.predict(x)));
  ASSERT_EQ(a.layers().size(), b.layers().size());
  for (std::size_t i = 1; i < a.layers().size(); ++i) {
    EXPECT_EQ(a.layers()[i]->class_name(), b.layers()[i]->class_name());
    EXPECT_EQ(a.layers()[i]->get_config(), b.layers()[i]->get_config()) << a.layers()[i]->name();
  }
}

TEST(SequenceModel, SavesAndLoadsInBothFormats) {
  auto model = sequence_model();
  model->fit(tokens(16), test::labels(16, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
  const std::string dir = test::fresh_test_dir("sequence_model", "both_formats");
  save_model(*model, dir + "/saved");
  expect_same_model(*model, *load_model(dir + "/saved"));
  save_model(*model, dir + ".keras");
  expect_same_model(*model, *load_model(dir + ".keras"));
}

TEST(SequenceModel, KerasArchiveHasKerasNamesAndDefaults) {
  auto model = sequence_model();
  const std::string path = test::fresh_test_dir("sequence_model", "layout") + ".keras";
  std::filesystem::remove(path);
  save_model(*model, path);
  const auto entries = io::decode_zip(io::read_file(path), path);
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  std::map<std::string, json> by_class;
  for (const auto& l : config["config"]["layers"]) by_class.emplace(l["class_name"].get<std::string>(), l["config"]);
  const json& e = by_class.at("Embedding");
  EXPECT_EQ(e["input_dim"], kVocab);
  EXPECT_EQ(e["output_dim"], 6);
  EXPECT_EQ(e["mask_zero"], false);
  EXPECT_EQ(e["embeddings_initializer"]["class_name"], "RandomUniform");
  EXPECT_NEAR(e["embeddings_initializer"]["config"]["minval"].get<double>(), -0.05, 1e-12);
  EXPECT_EQ(by_class.at("GlobalAveragePooling1D")["data_format"], "channels_last");
  EXPECT_EQ(by_class.at("Permute")["dims"], json::array({2, 1}));
  EXPECT_EQ(by_class.at("RepeatVector")["n"], 2);
  EXPECT_EQ(by_class.at("Softmax")["axis"], 1);
  EXPECT_EQ(by_class.at("Concatenate")["axis"], -1);
  EXPECT_EQ(by_class.at("Dot")["normalize"], true);
  for (const char* c : {"Multiply", "Subtract", "Average", "Maximum", "Minimum"}) EXPECT_TRUE(by_class.count(c)) << c;
  std::set<std::string> activations;
  for (const auto& l : config["config"]["layers"])
    if (l["class_name"] == "Dense") activations.insert(l["config"]["activation"].get<std::string>());
  EXPECT_EQ(activations, (std::set<std::string>{"gelu", "silu", "softmax"}));
}

}  // namespace
}  // namespace lockstep
