// Ops that rearrange elements with a gradient: concatenation along any axis and axis
// permutation. Both move elements through the storage kernels (scatter_add_rows,
// gather_rows), with the element map computed on the host, so every backend and dtype has them.
#include <numeric>

#include "tensor/op_util.hpp"

namespace lockstep {

namespace {
// Where each element of a (a's flat order) lands in concat(a, b) along `axis`, and b's.
std::array<Tensor, 2> concat_positions(const Shape& a, const Shape& b, int axis) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= a.dims()[static_cast<std::size_t>(i)];
  for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < a.rank(); ++i) inner *= a.dims()[i];
  const std::int64_t wa = a.dims()[static_cast<std::size_t>(axis)] * inner;
  const std::int64_t wb = b.dims()[static_cast<std::size_t>(axis)] * inner;
  std::vector<std::int64_t> pa(static_cast<std::size_t>(outer * wa)), pb(static_cast<std::size_t>(outer * wb));
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < wa; ++j) pa[static_cast<std::size_t>(o * wa + j)] = o * (wa + wb) + j;
    for (std::int64_t j = 0; j < wb; ++j) pb[static_cast<std::size_t>(o * wb + j)] = o * (wa + wb) + wa + j;
  }
  return {Tensor::from_vector(pa, {outer * wa}), Tensor::from_vector(pb, {outer * wb})};
}

Tensor concat_pair(const Tensor& a, const Tensor& b, int axis) {
  std::vector<std::int64_t> dims = a.shape().dims();
  dims[static_cast<std::size_t>(axis)] += b.dim(axis);
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
  Tensor out = first;
  for (std::size_t i = 1; i < tensors.size(); ++i) out = concat_pair(out, tensors[i], ax);
  return out;
}

Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  LOCKSTEP_CHECK(x.defined(), "transpose: the tensor is undefined");
  const std::size_t rank = x.rank();
  std::vector<int> seen(rank, 0);
  bool ok = perm.size() == rank;
  for (int p : perm) ok = ok && p >= 0 && static_cast<std::size_t>(p) < rank && !seen[static_cast<std::size_t>(p)]++;
  std::string given;
  for (int p : perm) given += (given.empty() ? "" : ", ") + std::to_string(p);
  LOCKSTEP_CHECK(ok, "transpose: (", given, ") is not a permutation of the ", rank, " axes of ", x.shape().str());
  std::vector<std::int64_t> in_strides(rank, 1), out_dims(rank);
  for (std::size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * x.shape().dims()[i];
  for (std::size_t i = 0; i < rank; ++i) out_dims[i] = x.shape().dims()[static_cast<std::size_t>(perm[i])];
  // source[o]: x's flat index of output element o, walking the output in order.
  const std::int64_t n = x.numel();
  std::vector<std::int64_t> source(static_cast<std::size_t>(n)), at(rank, 0);
  for (std::int64_t o = 0; o < n; ++o) {
    std::int64_t s = 0;
    for (std::size_t i = 0; i < rank; ++i) s += at[i] * in_strides[static_cast<std::size_t>(perm[i])];
    source[static_cast<std::size_t>(o)] = s;
    for (std::size_t i = rank; i-- > 0;) {
      if (++at[i] < out_dims[i]) break;
      at[i] = 0;
    }
  }
  const Tensor rows = gather_rows(reshape(x, {n, 1}), Tensor::from_vector(source, {n}));
  return reshape(rows, Shape(out_dims));
}

}  // namespace lockstep
