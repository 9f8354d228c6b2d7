// Scaled dot-product attention: the fused op (backend kernels attention / attention_backward)
// and its unfused composition of ops, the reference it is tested against.
#include <cmath>

#include "lockstep/tensor/attention.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
constexpr const char* kName = "scaled_dot_product_attention";

// The shapes checked and described for the kernels: q [b, h, tq, d], k [b, h, tk, d],
// v [b, h, tk, dv] (heads_last: [b, t, h, width]), mask uint8 [b|1, tk] or [b|1, 1|tq, tk].
backend::AttentionDesc describe(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const AttentionOptions& o) {
  detail::check_float(op, {&q, &k, &v});
  const int heads = o.heads_last ? 2 : 1, length = o.heads_last ? 1 : 2;
  const char* layout = o.heads_last ? "[batch, length, heads, depth]" : "[batch, heads, length, depth]";
  LOCKSTEP_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op, ": q, k and v must be ", layout,
                 ", got ", q.shape().str(), ", ", k.shape().str(), " and ", v.shape().str());
  LOCKSTEP_CHECK(k.dim(0) == q.dim(0) && v.dim(0) == q.dim(0) && k.dim(heads) == q.dim(heads) &&
                     v.dim(heads) == q.dim(heads) && k.dim(3) == q.dim(3) && v.dim(length) == k.dim(length),
                 op, ": q ", q.shape().str(), ", k ", k.shape().str(), " and v ", v.shape().str(), " (",
                 layout,
                 ") do not fit: they need one batch and head count, q and k one depth, k and v one length");
  LOCKSTEP_CHECK(o.dropout_rate >= 0.0f && o.dropout_rate < 1.0f, op,
                 ": dropout rate must be in [0, 1), got ", o.dropout_rate);
  backend::AttentionDesc a;
  a.b = q.dim(0);
  a.h = q.dim(heads);
  a.tq = q.dim(length);
  a.tk = k.dim(length);
  a.d = q.dim(3);
  a.dv = v.dim(3);
  a.heads_last = o.heads_last;
  a.scale = o.scale.value_or(a.d > 0 ? 1.0f / std::sqrt(static_cast<float>(a.d)) : 1.0f);
  a.causal = o.causal;
  a.dropout_rate = o.dropout_rate;
  a.seed = o.dropout_key.seed;
  a.stream = o.dropout_key.stream;
  a.step = o.dropout_key.step;
  a.first_example = o.dropout_key.first_example;
  if (mask.defined()) {
    detail::check_context_kind(op, mask);
    const bool rank_ok = mask.rank() == 2 || mask.rank() == 3;
    const std::int64_t mb = rank_ok ? mask.dim(0) : 0, mq = mask.rank() == 3 ? mask.dim(1) : 1;
    LOCKSTEP_CHECK(
        mask.dtype() == DType::kU8 && rank_ok && (mb == a.b || mb == 1) && (mq == a.tq || mq == 1) &&
            mask.dim(-1) == a.tk,
        op, ": the mask must be uint8 (1 = attend) of shape [batch, keys] or [batch, 1 or queries, keys] = (",
        a.b, ", ", a.tq, ", ", a.tk, "), got ", dtype_name(mask.dtype()), " ", mask.shape().str());
    a.mask_q_stride = mq == 1 ? 0 : a.tk;
    a.mask_b_stride = mb == 1 ? 0 : mq * a.tk;
  }
  return a;
}

Shape output_shape(const backend::AttentionDesc& a) {
  return a.heads_last ? Shape{a.b, a.tq, a.h, a.dv} : Shape{a.b, a.h, a.tq, a.dv};
}

const std::uint8_t* mask_data(const Tensor& mask) {
  return mask.defined() ? static_cast<const std::uint8_t*>(mask.raw_data()) : nullptr;
}

// The op's gradient: the backward kernel, from the inputs, the output and the row log-sum-exps.
// (Recorded as a custom gradient, so that adding the op left OpType, which every file sees,
// unchanged.)
class AttentionGradient final : public CustomGradient {
 public:
  AttentionGradient(Tensor mask, Tensor lse, const AttentionOptions& o)
      : mask_(std::move(mask)), lse_(std::move(lse)), o_(o) {}
  const char* name() const override { return kName; }
  std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g,
                                 const std::array<bool, 3>&) const override {
    return scaled_dot_product_attention_grad(r.inputs[0], r.inputs[1], r.inputs[2], mask_, r.output, lse_, g,
                                             o_);
  }

 private:
  Tensor mask_, lse_;
  AttentionOptions o_;
};
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    const AttentionOptions& o, Tensor* lse_out) {
  backend::AttentionDesc a = describe(kName, q, k, v, mask, o);
  const auto& kt = kern(kName, q, backend::KernelOp::kAttention);
  a.step_at = detail::dropout_step_at(kName, backend::KernelOp::kAttention, o.dropout_key, a.dropout_rate, q);
  Tensor out = Tensor::empty(output_shape(a), q.dtype());
  Tensor lse = Tensor::empty({a.b, a.h, a.tq}, DType::kF32);
  kt.attention(ctx(), a, q.raw_data(), k.raw_data(), v.raw_data(), mask_data(mask), out.raw_data(),
               static_cast<float*>(lse.raw_data()));
  if (lse_out) *lse_out = lse;
  if (detail::recording({&q, &k, &v})) {
    AttentionOptions resolved = o;
    resolved.scale = a.scale;
    record_custom({q, k, v}, out, std::make_shared<AttentionGradient>(mask, lse, resolved));
  }
  return out;
}

std::array<Tensor, 3> scaled_dot_product_attention_grad(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const Tensor& mask, const Tensor& out,
                                                        const Tensor& lse, const Tensor& dy,
                                                        const AttentionOptions& o) {
  constexpr const char* op = "scaled_dot_product_attention_grad";
  backend::AttentionDesc a = describe(op, q, k, v, mask, o);
  detail::check_float(op, {&q, &out, &dy});
  const Shape out_shape = output_shape(a);
  LOCKSTEP_CHECK(out.shape() == out_shape && dy.shape() == out_shape && lse.defined() &&
                     lse.dtype() == DType::kF32 && lse.shape() == Shape({a.b, a.h, a.tq}),
                 op, ": out and dy must be ", out_shape.str(), " and lse float32 (", a.b, ", ", a.h, ", ",
                 a.tq, "), got ", out.shape().str(), ", ", dy.shape().str(), " and ",
                 lse.defined() ? lse.shape().str() : std::string("undefined"));
  const auto& kt = kern(op, q, backend::KernelOp::kAttentionBackward);
  a.step_at =
      detail::dropout_step_at(op, backend::KernelOp::kAttentionBackward, o.dropout_key, a.dropout_rate, q);
  Tensor dq = Tensor::empty(q.shape(), q.dtype()), dk = Tensor::empty(k.shape(), k.dtype()),
         dv = Tensor::empty(v.shape(), v.dtype());
  kt.attention_backward(ctx(), a, q.raw_data(), k.raw_data(), v.raw_data(), mask_data(mask), out.raw_data(),
                        dy.raw_data(), static_cast<const float*>(lse.raw_data()), dq.raw_data(),
                        dk.raw_data(), dv.raw_data());
  return {dq, dk, dv};
}

Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           const AttentionOptions& o, Tensor* probabilities) {
  const backend::AttentionDesc a = describe("attention_reference", q, k, v, mask, o);
  if (o.heads_last) {
    // The composition below works heads-first: [b, t, h, d] <-> [b, h, t, d] around it.
    const std::vector<int> swap{0, 2, 1, 3};
    AttentionOptions first = o;
    first.heads_last = false;
    return transpose(attention_reference(transpose(q, swap), transpose(k, swap), transpose(v, swap), mask,
                                         first, probabilities),
                     swap);
  }
  const Tensor q3 = reshape(scale(q, a.scale), {a.b * a.h, a.tq, a.d});
  Tensor s =
      reshape(batch_matmul(q3, reshape(k, {a.b * a.h, a.tk, a.d}), false, true), {a.b, a.h, a.tq, a.tk});
  // Where m is 0 the score becomes Keras' large negative (-1e9; -3e4 in float16, whose range
  // ends at 65504): s * m + (m - 1) * big, exact for m in {0, 1}.
  Tensor keep;
  if (mask.defined()) {
    const std::int64_t mq = mask.rank() == 3 ? mask.dim(1) : 1;
    keep = reshape(cast(mask, q.dtype()), {mask.dim(0), 1, mq, a.tk});
  }
  if (a.causal) {
    const std::int64_t tk = a.tk;
    const DType dtype = q.dtype();
    const Tensor causal = device_constant(
        {"causal mask: keys, dtype", {tk, static_cast<std::int64_t>(dtype)}}, a.tq, [tk, dtype](std::int64_t tq) {
          std::vector<float> lower(static_cast<std::size_t>(tq * tk));
          for (std::int64_t i = 0; i < tq; ++i)
            for (std::int64_t j = 0; j < tk; ++j) lower[static_cast<std::size_t>(i * tk + j)] = j <= i ? 1.0f : 0.0f;
          return cast(Tensor::from_vector(lower, {tq, tk}), dtype);
        });
    keep = keep.defined() ? mul(keep, causal) : causal;
  }
  if (keep.defined())
    s = add(mul(s, keep), scale(add_scalar(keep, -1.0f), q.dtype() == DType::kF16 ? 3e4f : 1e9f));
  Tensor p = softmax(s, -1);
  if (probabilities) *probabilities = p;
  if (o.dropout_rate > 0) p = dropout(p, o.dropout_rate, o.dropout_key);
  return reshape(batch_matmul(reshape(p, {a.b * a.h, a.tq, a.tk}), reshape(v, {a.b * a.h, a.tk, a.dv})),
                 {a.b, a.h, a.tq, a.dv});
}

}  // namespace lockstep
