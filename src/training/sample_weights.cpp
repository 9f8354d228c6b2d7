// Keras' sample_weight and class_weight (sample_weights.hpp).
#include "training/sample_weights.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "lockstep/losses/reduction.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/model.hpp"
#include "lockstep/training/structure.hpp"

namespace lockstep::detail {
namespace {

using losses::one_weight_per_example;

// The positions of output k's loss (Loss::per_position): d1 * ... for an output (b, d1, ..., k),
// 1 for (b, k); 0 where the model is not built yet (unknown).
std::int64_t loss_positions(const Model& model, std::size_t k) {
  if (!model.built()) return 0;
  const auto* f = dynamic_cast<const Functional*>(&model);
  const Shape shape =
      f ? f->nodes()[f->output_nodes()[k]].output(static_cast<std::size_t>(f->output_indices()[k])) : model.output_shape();
  std::int64_t p = 1;
  for (std::size_t d = 1; d + 1 < shape.rank(); ++d) p *= shape[static_cast<std::int64_t>(d)];
  return p;
}

// `w` read as float32 on the host, N weights (shape (N,)) or N rows of one per position of the
// output's loss (`positions` of them; 0: unknown, any), each finite (a NaN or infinite weight
// would make every later loss and weight NaN without a word; Keras does not check, and lets
// negative ones be).
Tensor checked_weights(const Tensor& w, std::int64_t n, std::int64_t positions, const char* what) {
  const bool by_example = one_weight_per_example(w);
  const bool per_position = w.rank() == 2 && positions != 1 && (positions == 0 || w.dim(1) == positions);
  LOCKSTEP_CHECK(by_example || per_position, what, ": sample_weight must hold one weight per example (shape (", n,
                 ",) or (", n, ", 1))",
                 positions > 1 ? " or one per position of the output (shape (" + std::to_string(n) + ", " +
                                     std::to_string(positions) + "))"
                               : std::string(),
                 ", got shape ", w.shape().str());
  LOCKSTEP_CHECK(w.dim(0) == n, what, ": sample_weight has ", w.dim(0), " weights but the data has ", n,
                 " examples");
  std::vector<float> values = w.to(DType::kF32).to_vector<float>();
  const std::size_t row = by_example ? 1 : static_cast<std::size_t>(w.dim(1));
  for (std::size_t i = 0; i < values.size(); ++i)
    LOCKSTEP_CHECK(std::isfinite(values[i]), what, ": sample_weight[", i / row,
                   by_example ? std::string() : "][" + std::to_string(i % row), "] is ", values[i],
                   "; every weight must be finite");
  return Tensor::from_vector(values, by_example ? Shape{n} : w.shape()).on_host();
}

void check_class_weight(const Model& model, const std::map<int, double>& class_weight, const char* what) {
  // Keras' words (array_data_adapter.py, tf_dataset_adapter.py).
  LOCKSTEP_CHECK(model.output_structure().size() == 1, what,
                 ": `class_weight` is only supported for Models with a single output.");
  for (const auto& [c, weight] : class_weight)
    LOCKSTEP_CHECK(std::isfinite(weight), what, ": class_weight[", c, "] is ", weight,
                   "; every weight must be finite");
}

}  // namespace

Tensor class_weights(const Tensor& y, const std::map<int, double>& class_weight) {
  LOCKSTEP_CHECK(y.rank() >= 1 && y.rank() <= 2,
                 "class_weight: the targets must be class indices (N,) or (N, 1), or "
                 "one-hot rows (N, classes); got shape ",
                 y.shape().str());
  const std::int64_t n = y.dim(0);
  const std::int64_t row = y.rank() == 2 ? y.dim(1) : 1;
  const std::vector<float> values = y.to(DType::kF32).to_vector<float>();
  std::vector<float> weights(static_cast<std::size_t>(n), 1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const float* r = values.data() + i * row;
    std::int64_t c = 0;
    if (row > 1) {  // one-hot: the first largest, as np.argmax
      for (std::int64_t j = 1; j < row; ++j)
        if (r[j] > r[c]) c = j;
    } else {
      c = static_cast<std::int64_t>(std::nearbyint(r[0]));  // np.round: half to even
    }
    if (const auto it = class_weight.find(static_cast<int>(c)); it != class_weight.end())
      weights[static_cast<std::size_t>(i)] = static_cast<float>(it->second);
  }
  return Tensor::from_vector(weights, Shape{n}).on_host();
}

data::Element with_sample_weights(const Model& model, data::Element xy, const Tensor& sample_weight,
                                  const std::vector<Tensor>& per_output, const char* what) {
  const std::int64_t n = xy.front().dim(0);
  if (per_output.empty()) {
    if (sample_weight.defined())
      xy.push_back(checked_weights(sample_weight, n, model.output_structure().size() == 1 ? loss_positions(model, 0) : 0,
                                   what));
    return xy;
  }
  const Structure& outs = model.output_structure();
  LOCKSTEP_CHECK(!sample_weight.defined(), what, ": give sample_weight as one array or as one per output, not both");
  LOCKSTEP_CHECK(per_output.size() == outs.size(), what, ": sample_weight holds ", per_output.size(),
                 " arrays; the model has ", outs.size(), " outputs (", outs.joined(), "), one array each");
  for (std::size_t k = 0; k < per_output.size(); ++k) {
    const std::string output = std::string(what) + " (output '" + outs.names[k] + "')";
    LOCKSTEP_CHECK(per_output[k].defined(), output, ": sample_weight is missing");
    xy.push_back(checked_weights(per_output[k], n, loss_positions(model, k), output.c_str()));
  }
  return xy;
}

void check_one_kind_of_weights(bool sample_weights, const std::map<int, double>& class_weight, const char* what) {
  LOCKSTEP_CHECK(!sample_weights || class_weight.empty(), what,
                 ": You cannot `class_weight` and `sample_weight` at the same time.");
}

void check_no_sample_weight_beside(bool given, const char* what) {
  // Keras' words (data_adapters/__init__.py: raise_unsupported_arg), and where they go.
  LOCKSTEP_CHECK(
      !given, what,
      ": When providing `x` as a dataset, `sample_weight` should not be "
      "passed. Instead, the sample weights should be included as part of the dataset (its elements' "
      "component after the targets).");
}

data::Dataset with_class_weights(const Model& model, const data::Dataset& dataset,
                                 const std::map<int, double>& class_weight) {
  check_class_weight(model, class_weight, "fit");
  const std::size_t inputs = model.input_structure().size();
  return dataset.map([inputs, class_weight](data::Element e) {
    LOCKSTEP_CHECK(e.size() == inputs + 1,
                   "fit: You cannot `class_weight` and `sample_weight` at the same time "
                   "(the dataset's elements hold ",
                   e.size(), " tensors: inputs, a target, and sample weights?)");
    e.push_back(class_weights(e[inputs], class_weight));
    return e;
  });
}

Tensor output_losses(const losses::Loss& loss, const Tensor& y, Model::Output& o, const Tensor& weight) {
  if (!o.mask.defined() && (!weight.defined() || one_weight_per_example(weight))) {
    Tensor losses = o.output.defined() ? loss.per_example(y, o.output, o.logits)
                                       : loss.per_example_and_softmax(y, o.logits, o.output);
    if (!weight.defined()) return losses;
    const std::int64_t b = losses.dim(0);
    LOCKSTEP_CHECK(weight.dim(0) == b, "sample_weight: a batch of ", b, " examples needs one weight per example "
                   "(shape (", b, ",) or (", b, ", 1)), got shape ", weight.shape().str());
    const Tensor w = weight.rank() == 1 ? weight : weight.reshape(Shape{b});
    return mul(losses, cast(w, losses.dtype()));
  }
  if (!o.output.defined()) o.output = softmax(o.logits);
  const Tensor values = loss.per_position(y, o.output, o.logits);
  // Each example's mean of its weighted positions: their mean over the batch is Keras' reduction.
  const Tensor w = losses::apply_mask(weight, o.mask, values.shape(), losses::Reduction::kSumOverBatchSize, "its loss");
  const std::int64_t b = values.dim(0), p = b ? values.numel() / b : 1;
  return mean(mul(reshape(values, {b, p}), cast(w, values.dtype())), 1);
}

}  // namespace lockstep::detail
