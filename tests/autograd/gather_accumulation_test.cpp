// A tensor read by many gathers or row slices (a recurrent layer reads one step's rows per step)
// gets their gradients added into one buffer in place; the gradient must be what the sum of the
// reads' gradients is, however they mix with other readers of the tensor (whose gradient may be
// handed on as it is, and must not be written into).
#include <gtest/gtest.h>

#include <vector>

#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_rows.hpp"

using namespace lockstep;

namespace {
Tensor rows(std::vector<std::int64_t> r) {
  const auto n = static_cast<std::int64_t>(r.size());
  return Tensor::from_vector<std::int64_t>(std::move(r), {n});
}
}  // namespace

TEST(GatherAccumulation, GathersAndOtherReadersAddUpToTheGradient) {
  Variable x{test::random_uniform({5, 2}, 11)};
  GradientTape tape;
  const Tensor xv = x.value();
  // y = x + 1 hands its gradient to x as it is; y is read whole (sum), then gathered three times
  // (row 3 twice in one gather), and x itself is gathered after.
  const Tensor y = add_scalar(xv, 1.0f);
  Tensor loss = sum(y);
  loss = add(loss, sum(scale(gather_rows(y, rows({0, 3, 3})), 2.0f)));
  loss = add(loss, sum(scale(gather_rows(y, rows({1})), 3.0f)));
  loss = add(loss, sum(scale(gather_rows(y, rows({3})), 5.0f)));
  loss = add(loss, sum(scale(gather_rows(xv, rows({4, 0})), 7.0f)));
  const std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable>{x});
  ASSERT_EQ(g.size(), 1u);
  // Per row: 1 (sum y) + 2 per time gathered in the first + 3 + 5 + 7 (x's own gather).
  const std::vector<float> per_row{1 + 2 + 7, 1 + 3, 1, 1 + 2 * 2 + 5, 1 + 7};
  std::vector<float> want;
  for (float v : per_row) want.insert(want.end(), {v, v});
  EXPECT_EQ(g[0].to_vector<float>(), want);
}

TEST(GatherAccumulation, EachStepsRowsOfASequenceGetTheirOwnGradient) {
  // A sequence [batch 2 * steps 30, 3] read one step at a time, as a recurrent layer reads it.
  const std::int64_t batch = 2, steps = 30;
  Variable x{test::random_uniform({batch * steps, 3}, 12)};
  const Tensor w = test::random_uniform({3}, 13);
  GradientTape tape;
  std::vector<Tensor> outs;
  for (std::int64_t t = 0; t < steps; ++t)
    outs.push_back(scale(mul(gather_rows(x.value(), rows({t, steps + t})), w), static_cast<float>(t + 1)));
  const Tensor loss = sum(concatenate(outs, 0));
  const Tensor g = tape.gradient(loss, std::vector<Variable>{x}).front();
  const std::vector<float> gv = g.to_vector<float>(), wv = w.to_vector<float>();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t k = 0; k < 3; ++k)
        EXPECT_FLOAT_EQ(gv[static_cast<std::size_t>((b * steps + t) * 3 + k)],
                        static_cast<float>(t + 1) * wv[static_cast<std::size_t>(k)]);
}

TEST(Concatenate, ManyPiecesInOrderWithTheirGradients) {
  // 13 pieces of different lengths (an odd count at several levels of the pairing).
  std::vector<Variable> pieces;
  std::vector<float> want;
  for (int i = 0; i < 13; ++i) {
    pieces.emplace_back(test::random_uniform({2, 1 + i % 3}, 20 + static_cast<std::uint64_t>(i)));
  }
  GradientTape tape;
  std::vector<Tensor> values;
  for (const Variable& p : pieces) values.push_back(p.value());
  const Tensor out = concatenate(values, 1);
  ASSERT_EQ(out.shape(), (Shape{2, 25}));  // widths 1, 2, 3, 1, ... 1
  const std::vector<float> o = out.to_vector<float>();
  std::size_t col = 0;
  for (const Variable& p : pieces) {
    const std::vector<float> v = p.value().to_vector<float>();
    const std::size_t w = static_cast<std::size_t>(p.value().dim(1));
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t c = 0; c < w; ++c) EXPECT_EQ(o[r * 25 + col + c], v[r * w + c]);
    col += w;
  }
  // d/d piece of sum(out * position): each element's position in the output.
  std::vector<float> pos(50);
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<float>(i);
  const Tensor loss = sum(mul(out, Tensor::from_vector<float>(pos, {2, 25})));
  const std::vector<Tensor> g = tape.gradient(loss, pieces);
  col = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<float> gi = g[i].to_vector<float>();
    const std::size_t w = static_cast<std::size_t>(pieces[i].value().dim(1));
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t c = 0; c < w; ++c) EXPECT_EQ(gi[r * w + c], static_cast<float>(r * 25 + col + c));
    col += w;
  }
}

TEST(SliceAccumulation, SlicesAndOtherReadersAddUpToTheGradient) {
  Variable x{test::random_uniform({5, 2}, 14)};
  GradientTape tape;
  const Tensor xv = x.value();
  // As the gathers above: y = x + 1 is handed x's gradient as it is, read whole, then in
  // overlapping slices; x itself is sliced after.
  const Tensor y = add_scalar(xv, 1.0f);
  Tensor loss = sum(y);
  loss = add(loss, sum(scale(slice_rows(y, 0, 4), 2.0f)));
  loss = add(loss, sum(scale(slice_rows(y, 1, 2), 3.0f)));
  loss = add(loss, sum(scale(slice_rows(y, 3, 5), 5.0f)));
  loss = add(loss, sum(scale(slice_rows(xv, 4, 5), 7.0f)));
  const std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable>{x});
  ASSERT_EQ(g.size(), 1u);
  const std::vector<float> per_row{1 + 2, 1 + 2 + 3, 1 + 2, 1 + 2 + 5, 1 + 5 + 7};
  std::vector<float> want;
  for (float v : per_row) want.insert(want.end(), {v, v});
  EXPECT_EQ(g[0].to_vector<float>(), want);
}

namespace {
// The gradient of a time-major sequence [steps * batch 2, 3] read one step's rows at a time as a
// view, each step's output scaled by its step number; and the elementwise kernels the backward ran.
std::pair<Tensor, std::uint64_t> sliced_sequence_gradient(std::int64_t steps) {
  const std::int64_t batch = 2;
  Variable x{test::random_uniform({steps * batch, 3}, 15)};
  GradientTape tape;
  std::vector<Tensor> outs;
  for (std::int64_t t = 0; t < steps; ++t)
    outs.push_back(scale(slice_rows(x.value(), t * batch, (t + 1) * batch), static_cast<float>(t + 1)));
  const Tensor loss = sum(concatenate(outs, 0));
  const std::uint64_t before = detail::kernel_launches(Device{}, "binary");
  Tensor g = tape.gradient(loss, std::vector<Variable>{x}).front();
  return {g, detail::kernel_launches(Device{}, "binary") - before};
}
}  // namespace

TEST(SliceAccumulation, EachStepsRowsGetTheirGradientInOneBuffer) {
  const auto [g, launches] = sliced_sequence_gradient(30);
  const std::vector<float> gv = g.to_vector<float>();
  for (std::int64_t t = 0; t < 30; ++t)
    for (std::int64_t k = 0; k < 6; ++k) EXPECT_EQ(gv[static_cast<std::size_t>(t * 6 + k)], static_cast<float>(t + 1));
  // The steps' gradients, last step first, are copied into one buffer: no elementwise kernel per
  // step. Were each step's gradient a tensor of x's size added to the sum, every further step would
  // cost an add (and the backward the square of the steps).
  EXPECT_EQ(launches, sliced_sequence_gradient(20).second);
}

TEST(SliceAccumulation, RowsOutsideTheTensorAreRefused) {
  const Tensor x = Tensor::zeros(Shape{4, 2});
  EXPECT_THROW(slice_rows(x, 3, 5), ValueError);
  EXPECT_THROW(slice_rows(x, 2, 1), ValueError);
  Tensor dst = Tensor::zeros(Shape{4, 2});
  EXPECT_THROW(add_rows_into(dst, 3, Tensor::ones(Shape{2, 2})), ValueError);
  EXPECT_THROW(add_rows_into(dst, 0, Tensor::ones(Shape{2, 3})), ValueError);
}
