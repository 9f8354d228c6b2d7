#include "targets.hpp"

#include <utility>

#include "lockstep/core/error.hpp"
#include "lockstep/datasets/npz_dataset.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::cli {

namespace {
// Classes are inferred from the labels' largest value: one stray label must not size the model
// (y = 3,000,000 would build Dense(128, 3000001), > 6 GB). More than this needs --num-classes.
constexpr std::int64_t kMaxInferredClasses = 65536;

// The number of classes of the labels: --num-classes when given (every label below it),
// else the largest label + 1, refused past kMaxInferredClasses.
std::int64_t classes_of(const datasets::TrainTest& data, std::int64_t num_classes, const std::string& source) {
  const datasets::LabelAt top = datasets::largest_label(data);
  const std::string where = source + ": " + top.array + "[" + std::to_string(top.index) + "] is " +
                            std::to_string(top.value);
  if (num_classes > 0) {
    LOCKSTEP_CHECK(top.value < num_classes, where, ", outside --num-classes ", num_classes, " (labels 0 to ",
                   num_classes - 1, ")");
    return num_classes;
  }
  LOCKSTEP_CHECK(top.value < kMaxInferredClasses, where, ", which would make a model of ", top.value + 1,
                 " classes; lockstep infers at most ", kMaxInferredClasses,
                 " from the labels: give --num-classes N if that many are meant, or fix the labels");
  LOCKSTEP_CHECK(top.value + 1 >= 2, source, ": the labels hold ", top.value + 1, " class; a classifier needs at least 2");
  return top.value + 1;
}
}  // namespace

TargetPlan plan_targets(const TrainArgs& a, const datasets::TrainTest& data, const std::string& source) {
  TargetPlan p;
  p.loss = a.loss.empty() ? "sparse_categorical_crossentropy" : a.loss;
  const Tensor& y = data.train.y;
  const bool labels = y.rank() == 1 && !is_floating(y.dtype());
  const std::int64_t width = y.rank() == 1 ? 1 : y.dim(1);
  const std::string flag = a.loss.empty() ? "--loss sparse_categorical_crossentropy (the default)" : "--loss " + a.loss;
  const std::string what = source + ": y_train holds " + dtype_name(y.dtype()) + " of shape " + y.shape().str();
  if (p.loss == "sparse_categorical_crossentropy") {
    LOCKSTEP_CHECK(labels, what, ", but ", flag, " needs integer class labels (N,); give --loss "
                   "categorical_crossentropy for one-hot rows (N, classes), or --loss mse for regression targets");
    p.outputs = classes_of(data, a.num_classes, source);
    p.class_labels = true;
    p.activation = "softmax";
    p.metrics = {"accuracy"};
    return p;
  }
  LOCKSTEP_CHECK(a.num_classes == 0, "--num-classes applies to integer class labels (--loss "
                 "sparse_categorical_crossentropy); ", flag, " takes its outputs from y_train's shape ", y.shape().str());
  if (p.loss == "categorical_crossentropy") {
    LOCKSTEP_CHECK(width >= 2, what, ", but ", flag, " needs one-hot rows (N, classes) with at least 2 classes",
                   labels ? "; for integer class labels give --loss sparse_categorical_crossentropy (the default)" : "");
    p.outputs = width;
    p.activation = "softmax";
    p.metrics = {"accuracy"};
    return p;
  }
  p.outputs = width;
  if (p.loss == "binary_crossentropy") {
    for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"y_train", y}, {"y_test", data.test.y}}) {
      const Tensor flat = t.to(DType::kF32).reshape(Shape{t.numel()});
      const float lo = -reduce_max(neg(flat), 0).item(), hi = reduce_max(flat, 0).item();
      LOCKSTEP_CHECK(lo >= 0 && hi <= 1, source, ": ", name, " holds values from ", lo, " to ", hi, ", but ", flag,
                     " needs targets in [0, 1] (0/1 labels or probabilities); for more classes give --loss "
                     "sparse_categorical_crossentropy (the default)");
    }
    p.activation = "sigmoid";
    if (width == 1) p.metrics = {"accuracy"};  // a threshold at 0.5; Keras' binary_accuracy
    return p;
  }
  p.activation = "linear";  // regression: mse, mae
  p.metrics = {"mae"};
  return p;
}

}  // namespace lockstep::cli
