#include <cmath>

#include "lockstep/tensor/ops_softmax_xent.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
// matmul's and batch_matmul's record: the operands and their transposes.
void record_product(OpType type, const Tensor& a, const Tensor& b, const Tensor& out, bool ta, bool tb) {
  if (!detail::recording({&a, &b})) return;
  OpRecord r;
  r.type = type;
  r.inputs = {a, b, Tensor()};
  r.output = out;
  r.i0 = ta;
  r.i1 = tb;
  detail::record(r);
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  detail::check_float("matmul", {&a, &b});
  LOCKSTEP_CHECK(a.rank() == 2 && b.rank() == 2, "matmul: expected 2-D tensors, got ", a.shape().str(), " and ",
                 b.shape().str());
  const std::int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const std::int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  LOCKSTEP_CHECK(k == kb, "matmul: inner dimensions differ: ", a.shape().str(), (ta ? "^T" : ""), " @ ",
                 b.shape().str(), (tb ? "^T" : ""));
  const auto& kt = kern("matmul", a, backend::KernelOp::kGemm);
  Tensor out = Tensor::empty({m, n}, a.dtype());
  kt.gemm(ctx(), ta, tb, m, n, k, 1.0f, a.raw_data(), a.dim(1), b.raw_data(), b.dim(1), 0.0f, out.raw_data(), n);
  record_product(OpType::kMatmul, a, b, out, ta, tb);
  return out;
}

Tensor batch_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  detail::check_float("batch_matmul", {&a, &b});
  LOCKSTEP_CHECK(a.rank() == 3 && b.rank() == 3 && (a.dim(0) == b.dim(0) || a.dim(0) == 1 || b.dim(0) == 1),
                 "batch_matmul: expected 3-D tensors [batch, m, k] and [batch, k, n] of one batch size (or one of ",
                 "them a batch of 1), got ", a.shape().str(), " and ", b.shape().str());
  const std::int64_t batch = a.dim(0) == 1 ? b.dim(0) : a.dim(0);
  // A batch of 1 is every entry's operand (stride 0).
  const std::int64_t stride_a = a.dim(0) == 1 ? 0 : a.dim(1) * a.dim(2), stride_b = b.dim(0) == 1 ? 0 : b.dim(1) * b.dim(2);
  const std::int64_t m = ta ? a.dim(2) : a.dim(1), k = ta ? a.dim(1) : a.dim(2);
  const std::int64_t kb = tb ? b.dim(2) : b.dim(1), n = tb ? b.dim(1) : b.dim(2);
  LOCKSTEP_CHECK(k == kb, "batch_matmul: inner dimensions differ: ", a.shape().str(), (ta ? "^T" : ""), " @ ",
                 b.shape().str(), (tb ? "^T" : ""));
  const auto& kt = kern("batch_matmul", a, backend::KernelOp::kBatchGemm);
  Tensor out = Tensor::empty({batch, m, n}, a.dtype());
  kt.batch_gemm(ctx(), batch, ta, tb, m, n, k, 1.0f, a.raw_data(), a.dim(2), stride_a, b.raw_data(), b.dim(2),
                stride_b, 0.0f, out.raw_data(), n, m * n);
  record_product(OpType::kBatchMatmul, a, b, out, ta, tb);
  return out;
}

Tensor dense(const Tensor& x, const Tensor& kernel, const Tensor& bias, FusedActivation act) {
  detail::check_float("dense", {&x, &kernel});
  LOCKSTEP_CHECK(x.rank() == 2 && kernel.rank() == 2 && x.dim(1) == kernel.dim(0), "dense: input ",
                 x.shape().str(), " does not match kernel ", kernel.shape().str());
  detail::check_float("dense", {&x, &kernel});
  if (bias.defined()) {
    detail::check_float("dense", {&x, &bias});
    LOCKSTEP_CHECK(bias.rank() == 1 && bias.dim(0) == kernel.dim(1), "dense: bias ", bias.shape().str(),
                   " does not match kernel ", kernel.shape().str());
  }
  const std::int64_t m = x.dim(0), k = x.dim(1), n = kernel.dim(1);
  const bool relu = act == FusedActivation::kRelu;
  Tensor out = Tensor::empty({m, n}, x.dtype());
  if (bias.defined() || relu) {
    // The product, the bias and the ReLU in one op: a backend adds them in the GEMM's epilogue.
    kern("dense", x, backend::KernelOp::kGemmBiasActivation)
        .gemm_bias_activation(ctx(), x.raw_data(), kernel.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
                              out.raw_data(), m, n, k, relu);
  } else {
    kern("dense", x, backend::KernelOp::kGemm)
        .gemm(ctx(), false, false, m, n, k, 1.0f, x.raw_data(), k, kernel.raw_data(), n, 0.0f, out.raw_data(), n);
  }
  if (detail::recording({&x, &kernel, &bias})) {
    OpRecord r;
    r.type = OpType::kDense;
    r.inputs = {x, kernel, bias};
    r.output = out;
    r.i0 = static_cast<std::int64_t>(act);
    detail::record(r);
  }
  return out;
}

namespace {
Tensor softmax_impl(const char* name, OpType type, const Tensor& a, int axis) {
  detail::check_float(name, {&a});
  LOCKSTEP_CHECK(a.rank() >= 1, name, ": needs at least rank 1, got a scalar");
  const int ax = detail::normalize_axis(name, axis, a.rank());
  LOCKSTEP_CHECK(ax == static_cast<int>(a.rank()) - 1, name, ": only the last axis is supported, got axis ",
                 axis, " for shape ", a.shape().str());
  const std::int64_t cols = a.dim(-1), rows = cols ? a.numel() / cols : 0;
  const auto& k = kern(name, a, backend::KernelOp::kSoftmax);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  k.softmax(ctx(), a.raw_data(), out.raw_data(), rows, cols, type == OpType::kLogSoftmax);
  if (detail::recording({&a})) {
    OpRecord r;
    r.type = type;
    r.inputs = {a, Tensor(), Tensor()};
    r.output = out;
    detail::record(r);
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& a, int axis) { return softmax_impl("softmax", OpType::kSoftmax, a, axis); }
Tensor log_softmax(const Tensor& a, int axis) {
  return softmax_impl("log_softmax", OpType::kLogSoftmax, a, axis);
}

namespace {
// The per-example loss; with `probs` the softmax too (softmax_sparse_xent), recorded as the softmax
// op then the loss, as the two ops record them.
Tensor sparse_xent(const Tensor& labels, const Tensor& logits, Tensor* softmax_out) {
  constexpr const char* kName = "sparse_softmax_cross_entropy_with_logits";
  detail::check_float(kName, {&logits});
  const auto op = softmax_out ? backend::KernelOp::kSoftmaxSparseXent : backend::KernelOp::kSparseSoftmaxXent;
  const auto& k = kern(kName, logits, op);
  LOCKSTEP_CHECK(logits.rank() == 2, kName, ": logits must be (batch, classes), got ", logits.shape().str());
  LOCKSTEP_CHECK(labels.defined() && labels.numel() == logits.dim(0) && labels.rank() <= 2, kName, ": labels ",
                 (labels.defined() ? labels.shape().str() : std::string("undefined")),
                 " do not match logits ", logits.shape().str(), " (expected (", logits.dim(0), ",))");
  const std::int64_t rows = logits.dim(0), cols = logits.dim(1);
  const Tensor lab = detail::checked_labels(kName, labels, cols);
  const bool recorded = detail::recording({&logits});
  Tensor loss = Tensor::empty({rows}, logits.dtype());
  // The probabilities the backward reads: not kept beside a softmax output unless a tape records.
  Tensor probs = softmax_out && !recorded ? Tensor() : Tensor::empty(logits.shape(), logits.dtype());
  const auto* label_data = static_cast<const std::int64_t*>(lab.raw_data());
  if (softmax_out) {
    *softmax_out = Tensor::empty(logits.shape(), logits.dtype());
    k.softmax_sparse_xent(ctx(), logits.raw_data(), label_data, loss.raw_data(),
                          probs.defined() ? probs.raw_data() : nullptr, softmax_out->raw_data(), rows, cols);
  } else {
    k.sparse_softmax_xent(ctx(), logits.raw_data(), label_data, loss.raw_data(), probs.raw_data(), rows, cols);
  }
  if (recorded) {
    OpRecord r;
    if (softmax_out) {
      r.type = OpType::kSoftmax;
      r.inputs = {logits, Tensor(), Tensor()};
      r.output = *softmax_out;
      detail::record(r);
      r = OpRecord();
    }
    r.type = OpType::kSparseSoftmaxCE;
    r.inputs = {lab, logits, Tensor()};
    r.output = loss;
    r.saved = {probs, Tensor()};
    detail::record(r);
  }
  return loss;
}
}  // namespace

Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits) {
  return sparse_xent(labels, logits, nullptr);
}

LossAndSoftmax sparse_softmax_cross_entropy_and_softmax(const Tensor& labels, const Tensor& logits) {
  LossAndSoftmax out;
  out.loss = sparse_xent(labels, logits, &out.softmax);
  return out;
}

Tensor softmax_cross_entropy_with_logits(const Tensor& targets, const Tensor& logits) {
  constexpr const char* kName = "softmax_cross_entropy_with_logits";
  detail::check_float(kName, {&targets, &logits});
  LOCKSTEP_CHECK(logits.rank() == 2 && targets.shape() == logits.shape(), kName, ": targets ",
                 targets.shape().str(), " and logits ", logits.shape().str(), " must both be (batch, classes)");
  // Composed from recorded ops, so both arguments are differentiable.
  return neg(sum(mul(targets, log_softmax(logits)), 1));
}

Tensor dropout(const Tensor& x, float rate, const DropoutKey& key) {
  detail::check_float("dropout", {&x});
  LOCKSTEP_CHECK(rate >= 0.0f && rate < 1.0f, "dropout: rate must be in [0, 1), got ", rate);
  if (rate == 0.0f) return x;
  const std::int64_t rows = x.rank() ? x.dim(0) : 1, cols = rows ? x.numel() / rows : 0;
  const auto& kt = kern("dropout", x, backend::KernelOp::kDropout);
  const std::int64_t* step_at = detail::dropout_step_at("dropout", backend::KernelOp::kDropout, key, rate, x);
  // The mask and the product in one kernel; the mask kept only for a tape's backward.
  const bool recorded = detail::recording({&x});
  Tensor mask = recorded ? Tensor::empty(x.shape(), x.dtype()) : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  kt.dropout(ctx(), x.raw_data(), out.raw_data(), recorded ? mask.raw_data() : nullptr, rows, cols, rate, key.seed,
             key.stream, key.step, step_at, key.first_example);
  if (recorded) {
    OpRecord r;
    r.type = OpType::kDropout;
    r.inputs = {x, Tensor(), Tensor()};
    r.output = out;
    r.saved = {mask, Tensor()};
    detail::record(r);
  }
  return out;
}

Tensor sparse_categorical_matches(const Tensor& labels, const Tensor& predictions) {
  detail::check_float("sparse_categorical_matches", {&predictions});
  LOCKSTEP_CHECK(predictions.rank() == 2 && labels.numel() == predictions.dim(0),
                 "sparse_categorical_matches: labels ", labels.shape().str(), " do not match predictions ",
                 predictions.shape().str());
  detail::check_integer("sparse_categorical_matches", labels, "labels");
  const Tensor lab = labels.to(DType::kI64);
  return cast(equal(argmax(predictions, -1), lab.reshape({predictions.dim(0)})), DType::kF32);
}

Tensor accuracy_state(const Tensor& labels, const Tensor& predictions, bool labels_as_float) {
  constexpr const char* kName = "accuracy_state";
  detail::check_float(kName, {&predictions});
  LOCKSTEP_CHECK(labels.defined(), kName, ": the labels are undefined");
  LOCKSTEP_CHECK(predictions.rank() == 2, kName, ": predictions must be (rows, classes), got ",
                 predictions.shape().str());
  const std::int64_t rows = predictions.dim(0), cols = predictions.dim(1);
  const bool one_hot = labels_as_float && cols > 1 && labels.numel() == predictions.numel();
  LOCKSTEP_CHECK(labels.numel() == rows || one_hot, kName, ": labels ", labels.shape().str(),
                 " do not match predictions ", predictions.shape().str(), " (expected a label per row",
                 labels_as_float ? ", or one-hot rows)" : ")");
  LOCKSTEP_CHECK(rows == 0 || cols > 0, kName, ": predictions ", predictions.shape().str(), " have no classes");
  if (!labels_as_float) detail::check_integer(kName, labels, "labels");
  LOCKSTEP_CHECK(labels.device().kind == predictions.device().kind, kName, ": labels on ", labels.device().str(),
                 " and predictions on ", predictions.device().str());
  const auto& k = kern(kName, predictions, backend::KernelOp::kAccuracyState);
  Tensor state = Tensor::empty({2}, DType::kF32);
  k.accuracy_state(ctx(), predictions.raw_data(), rows, cols, labels.raw_data(), labels.dtype(),
                   one_hot ? cols : 1, labels_as_float, static_cast<float*>(state.raw_data()));
  return state;
}

}  // namespace lockstep
