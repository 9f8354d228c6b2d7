// Ops that rearrange elements with a gradient: concatenation along any axis, through the storage
// kernels (scatter_add_rows) with the element map computed on the host once per shape and kept
// on the device (device_constant), or, along the outermost axis, as two block copies with views of
// the output's gradient for the pieces'; and axis permutation, the transpose kernel's (the
// permutation is its parameters); neither copies from the host in a step, so a captured step
// replays both, for every backend and dtype.
#include <numeric>

#include "lockstep/tensor/device_constant.hpp"
#include "tensor/op_util.hpp"
#include "tensor/write_at.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
// Where each element of a (a's flat order) lands in concat(a, b) along `axis`, and b's.
std::array<Tensor, 2> concat_positions(const Shape& a, const Shape& b, int axis) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= a.dims()[static_cast<std::size_t>(i)];
  for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < a.rank(); ++i) inner *= a.dims()[i];
  const std::int64_t wa = a.dims()[static_cast<std::size_t>(axis)] * inner;
  const std::int64_t wb = b.dims()[static_cast<std::size_t>(axis)] * inner;
  // Rows of `width` elements at `offset` in rows of wa + wb.
  const auto positions = [&](std::int64_t width, std::int64_t offset) {
    const std::int64_t stride = wa + wb;
    return device_constant({"concatenate positions: width, offset, stride", {width, offset, stride}}, outer,
                           [=](std::int64_t rows) {
                             std::vector<std::int64_t> p(static_cast<std::size_t>(rows * width));
                             for (std::int64_t o = 0; o < rows; ++o)
                               for (std::int64_t j = 0; j < width; ++j)
                                 p[static_cast<std::size_t>(o * width + j)] = o * stride + offset + j;
                             return Tensor::from_vector(p, {rows, width});
                           })
        .reshape({outer * width});
  };
  return {positions(wa, 0), positions(wb, wa)};
}

// Along the outermost axis (every axis before it of size 1) a then b are two blocks: copied, and
// recorded with no element map (the pieces' gradients are views of the output's).
Tensor concat_blocks(const Tensor& a, const Tensor& b, Shape shape) {
  Tensor out = Tensor::empty(shape, a.dtype());
  detail::write_at(out, 0, a);
  detail::write_at(out, a.numel(), b);
  if (detail::recording({&a, &b})) {
    OpRecord r;
    r.type = OpType::kConcat;
    r.inputs = {a, b, Tensor()};
    r.output = out;
    r.i0 = a.numel();
    detail::record(r);
  }
  return out;
}

Tensor concat_pair(const Tensor& a, const Tensor& b, int axis) {
  std::vector<std::int64_t> dims = a.shape().dims();
  dims[static_cast<std::size_t>(axis)] += b.dim(axis);
  bool outermost = true;
  for (int i = 0; i < axis; ++i) outermost = outermost && a.dim(i) == 1;
  if (outermost) return concat_blocks(a, b, Shape(std::move(dims)));
  const auto [pa, pb] = concat_positions(a.shape(), b.shape(), axis);
  Tensor out = Tensor::zeros(Shape(dims), a.dtype());
  Tensor flat = out.reshape({out.numel(), 1});
  if (a.numel() > 0) scatter_add_rows(flat, pa, a.reshape({a.numel(), 1}));
  if (b.numel() > 0) scatter_add_rows(flat, pb, b.reshape({b.numel(), 1}));
  if (detail::recording({&a, &b})) {
    OpRecord r;
    r.type = OpType::kConcat;
    r.inputs = {a, b, Tensor()};
    r.output = out;
    r.saved = {pa, pb};
    detail::record(r);
  }
  return out;
}
}  // namespace

Tensor concatenate(const std::vector<Tensor>& tensors, int axis) {
  LOCKSTEP_CHECK(!tensors.empty(), "concatenate: no tensors");
  const Tensor& first = tensors[0];
  LOCKSTEP_CHECK(first.defined() && first.rank() >= 1, "concatenate: tensor 0 must have rank >= 1");
  const int ax = detail::normalize_axis("concatenate", axis, first.rank());
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool same = t.defined() && t.rank() == first.rank() && t.dtype() == first.dtype();
    for (std::size_t d = 0; same && d < first.rank(); ++d)
      same = static_cast<int>(d) == ax || t.shape().dims()[d] == first.shape().dims()[d];
    LOCKSTEP_CHECK(same, "concatenate: along axis ", axis, " tensor ", i, " is ",
                   t.defined() ? t.shape().str() + " " + dtype_name(t.dtype()) : std::string("undefined"),
                   ", tensor 0 is ", first.shape().str(), " ", dtype_name(first.dtype()),
                   " (every other dimension and the dtype must match)");
  }
  // Pairs, then pairs of pairs: each element is copied (and its gradient gathered back) about
  // log2(n) times, not up to n times as in a running concatenation (a recurrent layer's steps).
  std::vector<Tensor> level = tensors;
  while (level.size() > 1) {
    std::vector<Tensor> next;
    next.reserve((level.size() + 1) / 2);
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(concat_pair(level[i], level[i + 1], ax));
    if (level.size() % 2 == 1) next.push_back(level.back());
    level = std::move(next);
  }
  return level.front();
}

namespace {
// transpose's gradient: the output's gradient permuted back.
class TransposeGradient final : public CustomGradient {
 public:
  explicit TransposeGradient(std::vector<int> inverse) : inverse_(std::move(inverse)) {}
  const char* name() const override { return "transpose"; }
  std::array<Tensor, 3> backward(const OpRecord&, const Tensor& g, const std::array<bool, 3>&) const override {
    return {transpose(g, inverse_), Tensor(), Tensor()};
  }

 private:
  std::vector<int> inverse_;
};
}  // namespace

Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  LOCKSTEP_CHECK(x.defined(), "transpose: the tensor is undefined");
  const std::size_t rank = x.rank();
  std::vector<int> seen(rank, 0);
  bool ok = perm.size() == rank;
  for (int p : perm) ok = ok && p >= 0 && static_cast<std::size_t>(p) < rank && !seen[static_cast<std::size_t>(p)]++;
  std::string given;
  for (int p : perm) given += (given.empty() ? "" : ", ") + std::to_string(p);
  LOCKSTEP_CHECK(ok, "transpose: (", given, ") is not a permutation of the ", rank, " axes of ", x.shape().str());
  LOCKSTEP_CHECK(rank <= static_cast<std::size_t>(backend::kMaxRank), "transpose: ", x.shape().str(), " has ", rank,
                 " axes; at most ", backend::kMaxRank, " can be permuted");
  const auto& k = kern("transpose", x, backend::KernelOp::kTranspose);
  std::vector<std::int64_t> in_strides(rank, 1), out_dims(rank);
  for (std::size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * x.shape().dims()[i];
  backend::TransposeDesc d;
  d.rank = static_cast<int>(rank);
  std::vector<int> inverse(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const auto from = static_cast<std::size_t>(perm[i]);
    out_dims[i] = d.dims[i] = x.shape().dims()[from];
    d.src_strides[i] = in_strides[from];
    inverse[from] = static_cast<int>(i);
  }
  Tensor out = Tensor::empty(Shape(out_dims), x.dtype());
  k.transpose(ctx(), d, x.raw_data(), out.raw_data());
  if (detail::recording({&x})) record_custom({x, Tensor(), Tensor()}, out, std::make_shared<TransposeGradient>(inverse));
  return out;
}

}  // namespace lockstep
