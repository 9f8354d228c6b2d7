#pragma once
// What the tests of one layer inside a Functional model share (multi_head_attention_model_test,
// position_embedding_model_test): the small classifier around the layer, and its round trip
// through lockstep's folder format and a .keras archive.
#include <memory>
#include <string>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep::test {

/// Functional(in, Dense(3, softmax)(Flatten(x)), name, seed 7) compiled with Adam(1e-2),
/// sparse categorical crossentropy and accuracy: the layer under test sits between `in` and `x`.
inline std::unique_ptr<Functional> three_class_model(const KerasTensor& in, const KerasTensor& x, const std::string& name) {
  const KerasTensor out = call(layers::Dense(3, "softmax"), call(layers::Flatten(), x));
  auto m = std::make_unique<Functional>(in, out, name, 7);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

/// `model` saved to `dir`/saved and `dir`.keras and loaded from each: the same variables and the
/// same predictions on `x`, bit for bit, and the same config of layers()[1], the layer under test.
inline void expect_round_trip_in_both_formats(Model& model, const std::string& dir, const Tensor& x) {
  for (const std::string& path : {dir + "/saved", dir + ".keras"}) {
    save_model(model, path);
    auto loaded = load_model(path);
    expect_same_variables(model, *loaded);
    EXPECT_TRUE(same_bits(model.predict(x), loaded->predict(x))) << path;
    EXPECT_EQ(model.layers()[1]->get_config(), loaded->layers()[1]->get_config()) << path;
  }
}

}  // namespace lockstep::test
