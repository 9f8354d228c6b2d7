#include "lockstep/losses/loss.hpp"
#include "lockstep/tensor/ops_softmax_xent.hpp"

namespace lockstep::losses {

namespace {
constexpr float kEpsilon = 1e-7f;  // Keras' backend epsilon

void check_batch(const char* loss, const Tensor& y_true, const Tensor& y_pred) {
  LOCKSTEP_CHECK(y_true.defined() && y_pred.defined() && y_pred.rank() >= 1 && y_true.rank() >= 1 &&
                     y_true.dim(0) == y_pred.dim(0),
                 loss, ": y_true ", y_true.defined() ? y_true.shape().str() : "undefined", " and y_pred ",
                 y_pred.defined() ? y_pred.shape().str() : "undefined", " have different batch sizes");
}

// y_pred's shape without its last axis: the positions of Keras' per-position losses.
Shape positions_shape(const Tensor& y_pred) {
  std::vector<std::int64_t> dims = y_pred.shape().dims();
  dims.pop_back();
  return Shape(std::move(dims));
}

// Each example's mean of its per-position losses (b, d1, ...): per_example where y_pred has
// positions. A recorded reshape, so that the gradient reaches them.
Tensor mean_over_positions(const Tensor& positions) {
  const std::int64_t b = positions.dim(0);
  return mean(reshape(positions, {b, b ? positions.numel() / b : 0}), 1);
}

// -sum(target * log(clip(p / sum(p)))) over the class axis, as Keras for probabilities.
Tensor xent_from_probs(const Tensor& target, const Tensor& probs) {
  Tensor p = div(probs, sum(probs, -1, true));
  return neg(sum(mul(target, log(clip(p, kEpsilon, 1.0f - kEpsilon))), -1));
}

class SparseCCE final : public Loss {
 public:
  explicit SparseCCE(CrossentropyOptions o) : o_(o) {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  bool from_logits() const override { return o_.from_logits; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const override {
    check_batch("sparse_categorical_crossentropy", y_true, y_pred);
    if (y_pred.rank() > 2) return mean_over_positions(of_positions(y_true, y_pred, logits));
    LOCKSTEP_CHECK(y_pred.rank() == 2 && y_true.numel() == y_pred.dim(0), "sparse_categorical_crossentropy: y_true ",
                   y_true.shape().str(), " must hold one integer label per row of y_pred ", y_pred.shape().str());
    if (o_.from_logits) return sparse_softmax_cross_entropy_with_logits(y_true, y_pred);
    if (logits.defined()) return sparse_softmax_cross_entropy_with_logits(y_true, logits);
    return xent_from_probs(lockstep::one_hot(y_true, y_pred.dim(1)), y_pred);
  }
  Tensor per_position(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const override {
    check_batch("sparse_categorical_crossentropy", y_true, y_pred);
    return y_pred.rank() > 2 ? of_positions(y_true, y_pred, logits) : per_example(y_true, y_pred, logits);
  }
  Tensor per_example_and_softmax(const Tensor& y_true, const Tensor& logits, Tensor& y_pred) const override {
    // Rows of logits with a label each: per_example's path through the logits, and the softmax beside.
    if (o_.from_logits || logits.rank() != 2 || !y_true.defined() || y_true.rank() < 1 ||
        y_true.dim(0) != logits.dim(0) || y_true.numel() != logits.dim(0))
      return Loss::per_example_and_softmax(y_true, logits, y_pred);
    LossAndSoftmax both = sparse_softmax_cross_entropy_and_softmax(y_true, logits);
    y_pred = std::move(both.softmax);
    return std::move(both.loss);
  }

 private:
  CrossentropyOptions o_;
  // Keras' rule for y_pred (b, d1, ..., classes) and y_true (b, d1, ...): a label per position,
  // a loss per position (b, d1, ...); per_example is each example's mean of them, so that the
  // model's sum over examples / batch is Keras' mean over the b * d1 * ... positions.
  Tensor of_positions(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const {
    const std::int64_t classes = y_pred.dim(-1), positions = classes ? y_pred.numel() / classes : 0;
    const Shape want = positions_shape(y_pred);
    LOCKSTEP_CHECK(y_true.numel() == positions && (y_true.shape() == want || y_true.shape()[-1] == 1),
                   "sparse_categorical_crossentropy: y_true ", y_true.shape().str(), " must hold one integer label per "
                   "position of y_pred ", y_pred.shape().str(), " (shape ", want.str(), ")");
    const Shape rows{positions, classes};
    // Recorded reshapes (ops), so that the gradient reaches y_pred.
    const Tensor flat = per_example(y_true.reshape({positions}), reshape(y_pred, rows),
                                    logits.defined() ? reshape(logits, rows) : Tensor());
    return reshape(flat, want);
  }
};

class CCE final : public Loss {
 public:
  explicit CCE(CrossentropyOptions o) : o_(o) {}
  std::string name() const override { return "categorical_crossentropy"; }
  bool from_logits() const override { return o_.from_logits; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const override {
    check_batch("categorical_crossentropy", y_true, y_pred);
    LOCKSTEP_CHECK(y_true.shape() == y_pred.shape(), "categorical_crossentropy: y_true ", y_true.shape().str(),
                   " and y_pred ", y_pred.shape().str(), " must have the same shape (one-hot targets)");
    if (y_pred.rank() > 2) return mean_over_positions(per_position(y_true, y_pred, logits));
    const Tensor t = y_true.to(DType::kF32);
    if (o_.from_logits) return softmax_cross_entropy_with_logits(t, y_pred);
    if (logits.defined()) return softmax_cross_entropy_with_logits(t, logits);
    return xent_from_probs(t, y_pred);
  }
  /// y_pred (b, d1, ..., classes): a one-hot target per position, a loss per position (b, d1, ...).
  Tensor per_position(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const override {
    if (y_pred.rank() <= 2) return per_example(y_true, y_pred, logits);
    check_batch("categorical_crossentropy", y_true, y_pred);
    LOCKSTEP_CHECK(y_true.shape() == y_pred.shape(), "categorical_crossentropy: y_true ", y_true.shape().str(),
                   " and y_pred ", y_pred.shape().str(), " must have the same shape (one-hot targets)");
    const std::int64_t classes = y_pred.dim(-1);
    const Shape rows{classes ? y_pred.numel() / classes : 0, classes};
    const Tensor flat = per_example(y_true.to(DType::kF32).reshape(rows), reshape(y_pred, rows),
                                    logits.defined() ? reshape(logits, rows) : Tensor());
    return reshape(flat, positions_shape(y_pred));
  }

 private:
  CrossentropyOptions o_;
};

// A loss that is the mean of an element-wise loss of y_true and y_pred (binary cross-entropy, mean
// squared and absolute error): over each example's values (per_example), or, as Keras reduces
// them, over the last axis (per_position: (b, d1, ...) for y_pred (b, d1, ..., k)).
class MeanOfValues : public Loss {
 public:
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred, const Tensor&) const final {
    check(y_true, y_pred);
    const std::int64_t n = y_pred.dim(0);
    return rows_mean(y_true, y_pred, Shape{n, n ? y_pred.numel() / n : 0});
  }
  Tensor per_position(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const final {
    if (y_pred.rank() <= 2) return per_example(y_true, y_pred, logits);
    check(y_true, y_pred);
    const std::int64_t k = y_pred.dim(-1);
    return reshape(rows_mean(y_true, y_pred, Shape{k ? y_pred.numel() / k : 0, k}), positions_shape(y_pred));
  }

 protected:
  // The loss of each row of y_true and y_pred reshaped to `rows`: the mean over its values.
  virtual Tensor rows_mean(const Tensor& y_true, const Tensor& y_pred, const Shape& rows) const = 0;

 private:
  void check(const Tensor& y_true, const Tensor& y_pred) const {
    const std::string n = name();
    check_batch(n.c_str(), y_true, y_pred);
    LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), n, ": y_true ", y_true.shape().str(), " and y_pred ",
                   y_pred.shape().str(), " differ in size");
  }
};

class BCE final : public MeanOfValues {
 public:
  explicit BCE(CrossentropyOptions o) : o_(o) {}
  std::string name() const override { return "binary_crossentropy"; }
  bool from_logits() const override { return o_.from_logits; }

 private:
  CrossentropyOptions o_;
  Tensor rows_mean(const Tensor& y_true, const Tensor& y_pred, const Shape& rows) const override {
    const Tensor z = y_true.to(DType::kF32).reshape(rows);
    const Tensor x = reshape(y_pred, rows);
    if (o_.from_logits) {
      // max(x, 0) - x z + log(1 + exp(-|x|)): stable for any x.
      return mean(add(sub(relu(x), mul(x, z)), log(add_scalar(exp(neg(abs(x))), 1.0f))), -1);
    }
    const Tensor p = clip(x, kEpsilon, 1.0f - kEpsilon);
    const Tensor one_minus_z = add_scalar(neg(z), 1.0f);
    return neg(mean(add(mul(z, log(p)), mul(one_minus_z, log(add_scalar(neg(p), 1.0f)))), -1));
  }
};

// mean(f(y_pred - y_true)): mean squared (f = square) or absolute (f = abs) error.
class MeanError final : public MeanOfValues {
 public:
  explicit MeanError(bool squared) : squared_(squared) {}
  std::string name() const override { return squared_ ? "mean_squared_error" : "mean_absolute_error"; }

 private:
  bool squared_;
  Tensor rows_mean(const Tensor& y_true, const Tensor& y_pred, const Shape& rows) const override {
    const Tensor diff = sub(reshape(y_pred, rows), y_true.to(DType::kF32).reshape(rows));
    return mean(squared_ ? square(diff) : abs(diff), -1);
  }
};
}  // namespace

LossPtr SparseCategoricalCrossentropy(CrossentropyOptions o) { return std::make_shared<SparseCCE>(o); }
LossPtr CategoricalCrossentropy(CrossentropyOptions o) { return std::make_shared<CCE>(o); }
LossPtr BinaryCrossentropy(CrossentropyOptions o) { return std::make_shared<BCE>(o); }
LossPtr MeanSquaredError() { return std::make_shared<MeanError>(true); }
LossPtr MeanAbsoluteError() { return std::make_shared<MeanError>(false); }

LossPtr get(const std::string& name) {
  if (name == "sparse_categorical_crossentropy") return SparseCategoricalCrossentropy();
  if (name == "categorical_crossentropy") return CategoricalCrossentropy();
  if (name == "binary_crossentropy") return BinaryCrossentropy();
  if (name == "mse" || name == "mean_squared_error") return MeanSquaredError();
  if (name == "mae" || name == "mean_absolute_error") return MeanAbsoluteError();
  throw ValueError("unknown loss '" + name +
                   "': expected sparse_categorical_crossentropy, categorical_crossentropy, binary_crossentropy, "
                   "mean_squared_error or mean_absolute_error");
}

}  // namespace lockstep::losses
