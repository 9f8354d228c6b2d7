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

namespace {
std::shared_ptr<layers::MergeLayer> merge_layer(const layers::LayerPtr& l) {
  return std::dynamic_pointer_cast<layers::MergeLayer>(l);
}
Tensor vec(std::vector<float> v, const Shape& s) { return Tensor::from_vector(v, s); }
}  // namespace

TEST(ElementwiseMerge, MultiplySubtractAverageMaximumMinimum) {
  const Tensor a = vec({1, -2, 3, 4}, {2, 2}), b = vec({2, 5, -1, 4}, {2, 2}), c = vec({0.5f, 1, 2, -1}, {2, 2});
  EXPECT_EQ(merge_layer(layers::Multiply())->merge({a, b, c}, {}).to_vector<float>(), (std::vector<float>{1, -10, -6, -16}));
  EXPECT_EQ(merge_layer(layers::Subtract())->merge({a, b}, {}).to_vector<float>(), (std::vector<float>{-1, -7, 4, 0}));
  EXPECT_EQ(merge_layer(layers::Average())->merge({a, b}, {}).to_vector<float>(), (std::vector<float>{1.5f, 1.5f, 1, 4}));
  EXPECT_EQ(merge_layer(layers::Maximum())->merge({a, b, c}, {}).to_vector<float>(), (std::vector<float>{2, 5, 3, 4}));
  EXPECT_EQ(merge_layer(layers::Minimum())->merge({a, b, c}, {}).to_vector<float>(), (std::vector<float>{0.5f, -2, -1, -1}));
  const auto subtract = merge_layer(layers::Subtract());
  subtract->set_name("sub");
  EXPECT_MESSAGE(subtract->merge_output_shape({Shape{-1, 2}, Shape{-1, 2}, Shape{-1, 2}}),
                 "layer 'sub' (Subtract) should be called on a list of exactly 2 inputs, got 3");
  const auto multiply = merge_layer(layers::Multiply());
  multiply->set_name("mul");
  EXPECT_MESSAGE(multiply->merge_output_shape({Shape{-1, 2}, Shape{-1, 3}}),
                 "layer 'mul' (Multiply) needs inputs of one shape, got [(None, 2), (None, 3)]");
}

TEST(Concatenate, JoinsAlongTheLastOrAnotherAxis) {
  const Tensor a = vec({1, 2, 3, 4}, {2, 1, 2}), b = vec({5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 2});
  const auto last = merge_layer(layers::Concatenate());
  EXPECT_EQ(last->merge_output_shape({Shape{-1, 2, 1}, Shape{-1, 2, 3}}), (Shape{-1, 2, 4}));
  EXPECT_EQ(last->merge({vec({1, 2}, {2, 1}), vec({3, 4, 5, 6}, {2, 2})}, {}).to_vector<float>(),
            (std::vector<float>{1, 3, 4, 2, 5, 6}));
  const Tensor y = merge_layer(layers::Concatenate(1))->merge({a, b}, {});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
  last->set_name("cat");
  EXPECT_MESSAGE(last->merge_output_shape({Shape{-1, 2, 1}, Shape{-1, 3, 1}}),
                 "layer 'cat' (Concatenate) needs inputs that match except along axis -1, got [(None, 2, 1), (None, 3, 1)]");
  EXPECT_MESSAGE(merge_layer(layers::Concatenate(0))->merge_output_shape({Shape{-1, 2}, Shape{-1, 2}}),
                 "axis 0 is not an axis after the batch");
}

TEST(Dot, DotProductsAlongTheGivenAxes) {
  const auto dot = merge_layer(layers::Dot(1));
  EXPECT_EQ(dot->merge({vec({1, 2, 3, 4}, {2, 2}), vec({5, 6, 7, 8}, {2, 2})}, {}).to_vector<float>(),
            (std::vector<float>{17, 53}));
  // normalize: cosine similarity.
  const Tensor cos = merge_layer(layers::Dot(1, true))->merge({vec({3, 4}, {1, 2}), vec({4, 3}, {1, 2})}, {});
  EXPECT_NEAR(cos.to_vector<float>()[0], 24.0f / 25.0f, 1e-6f);
  // [1, 2, 2] and [1, 3, 2] along axes (2, 2): [1, 2, 3] of row dot products.
  const Tensor a = vec({1, 0, 0, 1}, {1, 2, 2}), b = vec({1, 2, 3, 4, 5, 6}, {1, 3, 2});
  const Tensor y = merge_layer(layers::Dot(2))->merge({a, b}, {});
  EXPECT_EQ(y.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 3, 5, 2, 4, 6}));
  // Axes (1, 1): a^T b per example, [1, 2, 2].
  const Tensor z = merge_layer(layers::Dot(1))->merge({vec({1, 2, 3, 4}, {1, 2, 2}), vec({1, 0, 0, 1}, {1, 2, 2})}, {});
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{1, 3, 2, 4}));
  dot->set_name("dot");
  EXPECT_MESSAGE(dot->merge_output_shape({Shape{-1, 2}, Shape{-1, 3}}), "layer 'dot' (Dot): axis 1 of (None, 2) and axis 1 of (None, 3) differ in size");
  EXPECT_MESSAGE(dot->merge_output_shape({Shape{-1, 2}, Shape{-1, 2}, Shape{-1, 2}}), "exactly 2 inputs, got 3");
}
