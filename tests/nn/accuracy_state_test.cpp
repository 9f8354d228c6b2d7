// Accuracy's batch state in one kernel (accuracy_state): the numbers of the ops it replaced, on
// the CPU (tests/gpu runs the same cases on a GPU), and its arguments' errors.
#include <gtest/gtest.h>

#include <string>

#include "common/accuracy_cases.hpp"
#include "common/error_message.hpp"

namespace lockstep {
namespace {

TEST(AccuracyState, GivesTheNumbersOfArgmaxCompareCastAndSum) { test::expect_accuracy_as_composed(Device{}); }

TEST(AccuracyState, KerasAccuracyIsExactEqualityValueByValue) { test::expect_keras_accuracy(Device{}); }

TEST(AccuracyState, NamesWhatItCannotCount) {
  const Tensor pred = Tensor::zeros({4, 3});
  const std::string float_labels =
      test::message_of([&] { (void)accuracy_state(Tensor::zeros({4}), pred); });
  EXPECT_NE(float_labels.find("labels must be integers"), std::string::npos) << float_labels;
  const std::string mismatch =
      test::message_of([&] { (void)accuracy_state(Tensor::zeros({5}, DType::kI64), pred); });
  EXPECT_NE(mismatch.find("labels (5,) do not match predictions (4, 3)"), std::string::npos) << mismatch;
  const std::string one_hot_sparse =
      test::message_of([&] { (void)accuracy_state(Tensor::zeros({4, 3}, DType::kI64), pred); });
  EXPECT_NE(one_hot_sparse.find("do not match"), std::string::npos) << "one-hot rows are Accuracy's: "
                                                                     << one_hot_sparse;
  const std::string no_classes =
      test::message_of([&] { (void)accuracy_state(Tensor::zeros({4}), Tensor::zeros({4, 0}), true); });
  EXPECT_NE(no_classes.find("have no classes"), std::string::npos) << no_classes;
}

}  // namespace
}  // namespace lockstep
