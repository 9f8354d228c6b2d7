// A gather's rows in chunks (detail::gather_rows_range_into, what RowBatch::gather_ahead's
// threads run): each chunk writes the bits the whole gather writes to its rows, and nothing
// else; its indices are checked, an error naming the index within the whole gather.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/tensor/ops.hpp"
#include "tensor/gather_range.hpp"

using namespace lockstep;

namespace {
const std::vector<std::int64_t> kIndex{4, 0, 3, 3, 1, 2};

// Rows [begin, end) of `t`, as floats.
std::vector<float> rows_of(const Tensor& t, std::int64_t begin, std::int64_t end) {
  return t.slice(begin, end).to_vector<float>();
}
}  // namespace

TEST(GatherRange, ChunksWriteTheWholeGathersRowsAndNoOthers) {
  std::vector<float> v(5 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1.0f;
  const Tensor src = Tensor::from_vector(v, {5, 3});
  const Tensor index = Tensor::from_vector(kIndex, {6});
  const Tensor whole = gather_rows(src, index);
  Tensor dst = Tensor::zeros({6, 3});
  detail::gather_rows_range_into(dst, src, index, 1, 4, std::nullopt);
  EXPECT_EQ(rows_of(dst, 1, 4), rows_of(whole, 1, 4));
  EXPECT_EQ(rows_of(dst, 0, 1), std::vector<float>(3, 0.0f)) << "a row before the chunk was written";
  EXPECT_EQ(rows_of(dst, 4, 6), std::vector<float>(6, 0.0f)) << "a row after the chunk was written";
  detail::gather_rows_range_into(dst, src, index, 0, 1, std::nullopt);
  detail::gather_rows_range_into(dst, src, index, 4, 6, std::nullopt);
  EXPECT_EQ(dst.to_vector<float>(), whole.to_vector<float>()) << "the chunks together are the gather";
}

TEST(GatherRange, ScaledChunksWriteTheScaledGathersBits) {
  std::vector<std::uint8_t> px(5 * 4);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 53) % 256);
  const Tensor src = Tensor::from_vector(px, {5, 4});
  const Tensor index = Tensor::from_vector(kIndex, {6});
  Tensor whole = Tensor::empty({6, 4}, DType::kF32);
  gather_rows_scaled_into(whole, src, index, 1.0f / 255.0f);
  Tensor dst = Tensor::zeros({6, 4});
  detail::gather_rows_range_into(dst, src, index, 0, 2, 1.0f / 255.0f);
  detail::gather_rows_range_into(dst, src, index, 2, 6, 1.0f / 255.0f);
  EXPECT_EQ(dst.to_vector<float>(), whole.to_vector<float>());
}

TEST(GatherRange, AnIndexOutsideIsNamedByItsPlaceInTheWholeGather) {
  const Tensor src = Tensor::zeros({5, 3});
  const Tensor index = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 7, 4, 9}, {6});
  Tensor dst = Tensor::zeros({6, 3});
  EXPECT_VALUE_ERROR(detail::gather_rows_range_into(dst, src, index, 2, 4, std::nullopt),
                     "gather_rows_into: label 7 at index 3 is outside [0, 5)");
  const Tensor bytes = Tensor::zeros({5, 3}, DType::kU8);
  EXPECT_VALUE_ERROR(detail::gather_rows_range_into(dst, bytes, index, 4, 6, 0.5f),
                     "gather_rows_scaled_into: label 9 at index 5");
  Tensor short_dst = Tensor::zeros({5, 3});
  EXPECT_VALUE_ERROR(detail::gather_rows_range_into(short_dst, src, index, 0, 2, std::nullopt), "cannot hold 6 rows");
}
