// applications::ViT: the layers, shapes and parameter count of the Vision Transformer the CLI's
// `--model vit` trains, that it learns through fit on 2 replicas, and the options it refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {

TEST(ViT, DefaultIsTheSpecifiedArchitecture) {
  const auto model = applications::ViT();
  // Conv2D 4x4x1x64 + 64; PositionEmbedding 49x64; 4 blocks of 2 LayerNormalization (128 each),
  // MultiHeadAttention (4 x (64x64 + 64)), Dense 64->128 and 128->64; the last LayerNormalization;
  // Dense 64->10.
  const std::int64_t block = 2 * 128 + 4 * (64 * 64 + 64) + (64 * 128 + 128) + (128 * 64 + 64);
  EXPECT_EQ(model->count_params(), 1088 + 49 * 64 + 4 * block + 128 + 650);
  EXPECT_EQ(model->count_params(), 138890);  // Keras' count for the same model
  std::map<std::string, int> classes;
  for (const auto& l : model->layers()) ++classes[l->class_name()];
  EXPECT_EQ(classes["Conv2D"], 1);
  EXPECT_EQ(classes["PositionEmbedding"], 1);
  EXPECT_EQ(classes["MultiHeadAttention"], 4);
  EXPECT_EQ(classes["LayerNormalization"], 9);
  EXPECT_EQ(classes["Dense"], 9);
  EXPECT_EQ(classes["Add"], 9);
  EXPECT_EQ(classes["GlobalAveragePooling1D"], 1);
  EXPECT_EQ(classes["Dropout"], 1);
  for (const auto& l : model->layers()) {
    if (l->class_name() == "LayerNormalization") {
      EXPECT_NEAR(l->get_config()["epsilon"].get<double>(), 1e-6, 1e-12);
    }
    if (l->class_name() == "MultiHeadAttention") {
      EXPECT_EQ(l->get_config()["num_heads"], 4);
      EXPECT_EQ(l->get_config()["key_dim"], 16);
    }
  }
  const auto& last = model->layers().back();
  EXPECT_EQ(last->get_config()["activation"], "softmax");
  EXPECT_EQ(last->get_config()["units"], 10);
}

TEST(ViT, OptionsShapeTheModel) {
  const auto model = applications::ViT({.input_shape = {12, 8, 3}, .classes = 3, .patch_size = 4, .dim = 6,
                                        .num_heads = 2, .depth = 1, .mlp_dim = 5, .dropout = 0.0f});
  // 3 x 2 = 6 tokens of 6 features.
  const auto& pe = *model->layers().at(3);
  ASSERT_EQ(pe.class_name(), "PositionEmbedding");
  EXPECT_EQ(pe.variables().at(0).shape(), (Shape{6, 6}));
  const Tensor y = model->predict(test::inputs(5, 12 * 8 * 3).reshape({5, 12, 8, 3}));
  ASSERT_EQ(y.shape(), (Shape{5, 3}));
  for (std::int64_t r = 0; r < 5; ++r) {
    float s = 0;
    for (std::int64_t c = 0; c < 3; ++c) s += y.to_vector<float>()[static_cast<std::size_t>(r * 3 + c)];
    EXPECT_NEAR(s, 1.0f, 1e-5f);
  }
}

// A small ViT learns a rule of the image that needs attention across patches: the class is
// which quadrant holds the bright patch.
TEST(ViT, LearnsOnTwoReplicasThroughFit) {
  distribute::MirroredStrategy strategy({.num_cpu_devices = 2});
  auto scope = strategy.scope();
  auto model = applications::ViT({.input_shape = {8, 8, 1}, .classes = 4, .patch_size = 4, .dim = 8,
                                  .num_heads = 2, .depth = 1, .mlp_dim = 16, .dropout = 0.0f});
  model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const std::int64_t n = 64;
  std::vector<float> x(static_cast<std::size_t>(n * 64), 0.1f);
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i % 4;
    const std::int64_t r0 = (i % 4) / 2 * 4, c0 = (i % 4) % 2 * 4;
    for (std::int64_t r = r0; r < r0 + 4; ++r)
      for (std::int64_t c = c0; c < c0 + 4; ++c) x[static_cast<std::size_t>(i * 64 + r * 8 + c)] = 0.9f;
  }
  const Tensor xt = Tensor::from_vector(x, {n, 8, 8, 1}), yt = Tensor::from_vector(y, {n});
  const std::uint64_t fused = detail::kernel_launches(Device{}, "softmax_sparse_xent");
  const auto history = model->fit(xt, yt, {.epochs = 15, .batch_size = 16, .verbose = 0});
  // The softmax classifier's softmax is computed with the loss, in one kernel per step and replica.
  EXPECT_EQ(detail::kernel_launches(Device{}, "softmax_sparse_xent") - fused, 15u * 4u);
  const auto& loss = history.history.at("loss");
  EXPECT_LT(loss.back(), 0.5 * loss.front());
  EXPECT_GE(model->evaluate(xt, yt, {.batch_size = 32}).at("accuracy"), 0.99);
}

TEST(ViT, RefusesOptionsByName) {
  const auto message = [](const applications::ViTOptions& o) {
    return test::message_of([&] { applications::ViT(o); });
  };
  EXPECT_NE(message({.input_shape = {28, 28, 1}, .patch_size = 5}).find("patch_size 5 must divide"), std::string::npos);
  EXPECT_NE(message({.input_shape = {28, 28}}).find("input_shape must be (height, width, channels)"),
            std::string::npos);
  EXPECT_NE(message({.dim = 30, .num_heads = 4}).find("dim 30 must be a positive multiple of num_heads 4"),
            std::string::npos);
  EXPECT_NE(message({.depth = 0}).find("depth (0)"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
