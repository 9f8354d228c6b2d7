// The layer registry: a layer class registered with register_layer_class (one call, as a custom
// layer would) saves and loads in lockstep's format and as .keras, through its own get_config()
// and from_config, with no other list to edit.
#include "lockstep/layers/layer_registry.hpp"

#include <gtest/gtest.h>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;

// x * factor, with one argument and no weights.
class ScaleLayer final : public layers::Layer {
 public:
  explicit ScaleLayer(float factor, std::string name = "") : Layer(std::move(name)), factor_(factor) {}
  std::string class_name() const override { return "TestScale"; }
  json get_config() const override {
    json c = Layer::get_config();
    c["factor"] = factor_;
    return c;
  }
  static layers::LayerPtr from_config(const json& c) {
    return std::make_shared<ScaleLayer>(c.at("factor").get<float>(), c.at("name").get<std::string>());
  }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext&) const override { return scale(x, factor_); }
  float factor() const { return factor_; }

 private:
  float factor_;
};

void register_once() {
  if (!layers::find_layer_class("TestScale")) layers::register_layer_class({"TestScale", &ScaleLayer::from_config});
}

TEST(LayerRegistry, RegisteredClassSavesAndLoadsInBothFormats) {
  register_once();
  Sequential model({layers::Dense(3, "linear", 2), std::make_shared<ScaleLayer>(2.5f)}, "scaled");
  const std::string dir = test::fresh_test_dir("layer_registry", "both");
  const Tensor x = test::inputs(4, 2);
  for (const std::string& path : {dir, dir + ".keras"}) {
    save_model(model, path);
    auto loaded = load_model(path);
    const auto* s = dynamic_cast<const ScaleLayer*>(loaded->layers().back().get());
    ASSERT_NE(s, nullptr) << path;
    EXPECT_EQ(s->factor(), 2.5f);
    EXPECT_EQ(s->name(), "test_scale");
    EXPECT_TRUE(test::same_bits(model.predict(x), loaded->predict(x))) << path;
  }
}

TEST(LayerRegistry, RefusesADuplicateOrIncompleteClassAndListsTheClasses) {
  register_once();
  EXPECT_THROW(layers::register_layer_class({"TestScale", &ScaleLayer::from_config}), ValueError);
  EXPECT_THROW(layers::register_layer_class({"Dense", &ScaleLayer::from_config}), ValueError);
  EXPECT_THROW(layers::register_layer_class({"", &ScaleLayer::from_config}), ValueError);
  EXPECT_THROW(layers::register_layer_class({"NoFactory", nullptr}), ValueError);
  const std::string names = layers::layer_class_names();
  for (const char* cls : {"Dense", "Conv2D", "BatchNormalization", "Add", "TestScale"})
    EXPECT_NE(names.find(cls), std::string::npos) << names;
  EXPECT_FALSE(layers::find_layer_class("Conv3D").has_value());
}

}  // namespace
}  // namespace lockstep
