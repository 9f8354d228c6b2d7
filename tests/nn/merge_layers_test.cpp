// The Add merge layer: forward values, shape rules and the errors a user meets.
#include <gtest/gtest.h>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using test::message_of;

#define EXPECT_MESSAGE(stmt, text) EXPECT_NE(message_of([&] { (void)(stmt); }).find(text), std::string::npos) << message_of([&] { (void)(stmt); })

namespace {
std::shared_ptr<layers::MergeLayer> make_add() {
  auto add = std::dynamic_pointer_cast<layers::MergeLayer>(layers::Add());
  add->set_name("add");
  return add;
}
}  // namespace

TEST(Add, SumsItsInputsElementWiseInOrder) {
  const auto add = make_add();
  EXPECT_EQ(add->class_name(), "Add");
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30, 40}, {2, 2});
  const Tensor c = Tensor::from_vector(std::vector<float>{0.5f, -1, 0, 100}, {2, 2});
  EXPECT_EQ(add->merge({a, b}, {}).to_vector<float>(), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(add->merge({a, b, c}, {}).to_vector<float>(), (std::vector<float>{11.5f, 21, 33, 144}));
  EXPECT_EQ(add->merge_output_shape({Shape{-1, 8, 8, 16}, Shape{-1, 8, 8, 16}}), (Shape{-1, 8, 8, 16}));
  EXPECT_EQ(add->merge({Tensor::zeros({0, 2}), Tensor::zeros({0, 2})}, {}).shape(), (Shape{0, 2}));  // an empty slice
}

TEST(Add, InputsOfDifferentShapesAreAnErrorNamingTheLayerAndBothShapes) {
  const auto add = make_add();
  EXPECT_MESSAGE(add->merge_output_shape({Shape{-1, 8, 8, 16}, Shape{-1, 8, 8, 32}}), "layer 'add' (Add) needs inputs of one shape, got [(None, 8, 8, 16), (None, 8, 8, 32)]");
  EXPECT_MESSAGE(add->merge_output_shape({Shape{-1, 4}}), "layer 'add' (Add) should be called on a list of at least 2 inputs, got 1");
}

TEST(Add, InASequentialIsAnErrorSayingItTakesAList) {
  EXPECT_MESSAGE(Sequential({layers::Dense(4, "relu", 3), layers::Add()}), "(Add) merges a list of tensors but is given one, of shape (None, 4)");
}
