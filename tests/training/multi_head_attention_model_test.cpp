// MultiHeadAttention inside a Functional model (self-attention, mha(x, x)): it trains through
// fit and saves and loads, bit for bit, in lockstep's folder format and as a Keras 3 .keras
// archive laid out as Keras writes it (positional call arguments, weights in sublayer groups).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/multi_head_attention.hpp"
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

}  // namespace
}  // namespace lockstep
