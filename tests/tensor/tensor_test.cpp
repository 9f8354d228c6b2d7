#include <gtest/gtest.h>

#include <cmath>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "common/error_message.hpp"
#include "lockstep/tensor/device_upload.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/tensor.hpp"

using namespace lockstep;

TEST(Tensor, FromVectorRoundTripsAndViewsAlias) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.data<float>()[0], 3.0f);
  s.data<float>()[0] = 30.0f;
  EXPECT_EQ(t.data<float>()[2], 30.0f);  // a view writes through
  Tensor r = t.reshape({-1});
  EXPECT_EQ(r.shape(), (Shape{6}));
  Tensor c = t.clone();
  c.data<float>()[0] = -1;
  EXPECT_EQ(t.data<float>()[0], 1.0f);
}

TEST(Tensor, BadReshapeNamesShapes) {
  Tensor t = Tensor::zeros({3, 2});
  try {
    t.reshape({4, 2});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(3, 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(4, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.data<std::int32_t>(), ValueError);
  EXPECT_THROW(t.slice(2, 5), ValueError);
}

TEST(Tensor, DtypeConversion) {
  Tensor u = Tensor::from_vector<std::uint8_t>({0, 255, 7}, {3});
  Tensor f = u.to(DType::kF32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0, 255, 7}));
  EXPECT_FLOAT_EQ(Tensor::scalar(2.5f).item(), 2.5f);
  // To the dtype it has: the tensor itself, not a copy (torch's .to, tf.cast), recorded or not.
  EXPECT_EQ(f.to(DType::kF32).raw_data(), f.raw_data());
  EXPECT_EQ(cast(f, DType::kF32).raw_data(), f.raw_data());
  EXPECT_EQ(u.to(DType::kU8).raw_data(), u.raw_data());
  EXPECT_NE(f.to(DType::kF16).raw_data(), f.raw_data());
}

TEST(Allocator, ReusesFreedBlocks) {
  backend::ComputeContext ctx(Device{}, 1);
  backend::ContextGuard guard(ctx);
  { Tensor a = Tensor::empty({1000}); }
  const auto before = ctx.allocator().stats().system_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor a = Tensor::empty({1000});
    Tensor b = Tensor::empty({900});  // same size class as a: served by a second cached block at most once
  }
  EXPECT_LE(ctx.allocator().stats().system_allocations, before + 1);
}

// ---- the device boundary as a user meets it ----
#include "common/error_message.hpp"
#include "lockstep/tensor/ops.hpp"

using lockstep::test::message_of;

namespace {
bool mentions(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s.find(w) == std::string::npos) return false;
  return true;
}
}  // namespace

TEST(DeviceBoundary, SixteenBitFloatsAreStoredAndConvertedBack) {
  Tensor f = Tensor::from_vector<float>({1.0f, -2.5f, 1.0f / 3.0f, 70000.0f}, {4});
  Tensor h = f.to(DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.nbytes(), 8u);
  const auto back = h.to(DType::kF32).to_vector<float>();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[2], 0.333251953125f);          // nearest float16 to 1/3
  EXPECT_TRUE(std::isinf(back[3]));              // beyond float16's 65504
  const auto b = f.to(DType::kBF16).to(DType::kF32).to_vector<float>();
  EXPECT_EQ(b[2], 0.333984375f);                 // nearest bfloat16 to 1/3
  EXPECT_EQ(b[3], 70144.0f);                     // bfloat16 keeps float32's range
  EXPECT_EQ(Tensor::full({2}, 3.0, DType::kBF16).to(DType::kF32).to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST(DeviceBoundary, FillCopyAndCompareGoThroughTheBackend) {
  Tensor t = Tensor::zeros({5}, DType::kI32);
  t.fill_(7);
  EXPECT_EQ(t.to_vector<std::int32_t>(), (std::vector<std::int32_t>(5, 7)));
  Tensor u = Tensor::empty({5}, DType::kI32);
  u.copy_from(t);
  EXPECT_TRUE(u.bitwise_equal(t));
  std::int32_t one = 1;
  u.copy_from_host(&one, sizeof one, 2 * sizeof one);
  EXPECT_FALSE(u.bitwise_equal(t));
  EXPECT_EQ(u.to_vector<std::int32_t>()[2], 1);
  EXPECT_TRUE(mentions(message_of([&] { u.copy_from_host(&one, sizeof one, 5 * sizeof one); }), {"outside"}));
}

TEST(DeviceBoundary, ToDeviceCopiesAndNamesAMissingBackend) {
  Tensor t = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_TRUE(t.to(Device{}).is_same(t));  // already there
  Tensor moved = t.to(Device{DeviceKind::kCpu, 1});
  EXPECT_EQ(moved.device(), (Device{DeviceKind::kCpu, 1}));
  EXPECT_EQ(moved.to_vector<float>(), t.to_vector<float>());
  if (backend::device_kind(DeviceKind::kCuda).count() > 0) {  // a GPU session: the copy is there and back
    const Tensor on_gpu = t.to(Device{DeviceKind::kCuda, 0});
    EXPECT_EQ(on_gpu.device(), (Device{DeviceKind::kCuda, 0}));
    EXPECT_EQ(on_gpu.to_vector<float>(), t.to_vector<float>());
    return;
  }
  const std::string err = message_of([&] { t.to(Device{DeviceKind::kCuda, 0}); });
  EXPECT_TRUE(mentions(err, {"gpu:0", "CUDA"})) << err;
}

TEST(DeviceBoundary, AMissingKernelNamesOpDtypeAndDevice) {
  // Losses stay float32 (mixed precision computes them there): a bfloat16 logit is refused clearly.
  const Tensor logits = Tensor::zeros({2, 3}, DType::kBF16);
  const Tensor labels = Tensor::from_vector<std::int64_t>({0, 1}, {2});
  const std::string err = message_of([&] { sparse_softmax_cross_entropy_with_logits(labels, logits); });
  EXPECT_TRUE(mentions(err, {"sparse_softmax_cross_entropy_with_logits", "bfloat16", "cpu:0"})) << err;
  EXPECT_TRUE(mentions(message_of([&] { add(Tensor::zeros({2}), Tensor::zeros({2}, DType::kF16)); }),
                       {"add", "float32", "float16"}));
  EXPECT_TRUE(mentions(message_of([&] { (void)Tensor::zeros({2}, DType::kF16).data<float>(); }),
                       {"float16", "float32"}));
  // Compute on 16-bit floats works (in float32 inside) and keeps the dtype.
  const Tensor h = add(Tensor::ones({3}, DType::kF16), Tensor::ones({3}, DType::kF16));
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.to(DType::kF32).to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

// DeviceUpload on a CPU context (the GPU path: tests/gpu/gpu_memory_test.cpp): nothing is reserved
// or copied, take() hands out the host tensors themselves, and misuse is a named error.
TEST(DeviceUpload, OnACpuContextTakeHandsOutTheHostTensorsUncopied) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor y = Tensor::from_vector<std::int64_t>({7, 8, 9}, {3});
  DeviceUpload up({x.shape(), y.shape()}, {DType::kF32, DType::kI64});
  EXPECT_FALSE(up.started());
  EXPECT_NE(lockstep::test::message_of([&] { (void)up.take(); }).find("not started"), std::string::npos);
  up.start({x, y});
  EXPECT_TRUE(up.started());
  const std::vector<Tensor> got = up.take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].raw_data(), x.raw_data());
  EXPECT_EQ(got[1].raw_data(), y.raw_data());
  EXPECT_NE(lockstep::test::message_of([&] { (void)up.take(); }).find("taken already"), std::string::npos);
}

TEST(DeviceUpload, TensorsOtherThanTheReservedOnesAreANamedError) {
  const Tensor x = Tensor::zeros({3, 2});
  DeviceUpload wrong_shape({Shape({4, 2})}, {DType::kF32});
  const std::string err = lockstep::test::message_of([&] { wrong_shape.start({x}); });
  EXPECT_NE(err.find("(3, 2)"), std::string::npos) << err;
  EXPECT_NE(err.find("(4, 2)"), std::string::npos) << err;
  DeviceUpload wrong_dtype({Shape({3, 2})}, {DType::kI64});
  EXPECT_NE(lockstep::test::message_of([&] { wrong_dtype.start({x}); }).find("int64"), std::string::npos);
  DeviceUpload wrong_count({Shape({3, 2}), Shape({3})}, {DType::kF32, DType::kI64});
  EXPECT_NE(lockstep::test::message_of([&] { wrong_count.start({x}); }).find("1 tensors for 2"), std::string::npos);
}

// Each entry of a batched product is matmul's of that entry, bit for bit, whatever the transposes.
TEST(BatchMatmul, EachEntryIsMatmulOfThatEntry) {
  std::vector<float> av(2 * 3 * 4), bv(2 * 4 * 5);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = std::sin(static_cast<float>(i)) * 0.7f;
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(static_cast<float>(i)) * 1.3f;
  const Tensor a = Tensor::from_vector<float>(av, {2, 3, 4}), b = Tensor::from_vector<float>(bv, {2, 4, 5});
  const Tensor out = batch_matmul(a, b);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5}));
  std::vector<float> atv(av.size());  // a with each entry transposed: [2, 4, 3]
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t r = 0; r < 3; ++r)
      for (std::size_t p = 0; p < 4; ++p) atv[i * 12 + p * 3 + r] = av[i * 12 + r * 4 + p];
  const Tensor a_t = Tensor::from_vector<float>(atv, {2, 4, 3});
  const Tensor out_t = batch_matmul(a_t, b, true, false);
  for (std::int64_t i = 0; i < 2; ++i) {
    const Tensor ai = a.slice(i, i + 1).reshape({3, 4}), bi = b.slice(i, i + 1).reshape({4, 5});
    EXPECT_TRUE(out.slice(i, i + 1).reshape({3, 5}).bitwise_equal(matmul(ai, bi))) << "entry " << i;
    const Tensor ati = a_t.slice(i, i + 1).reshape({4, 3});
    EXPECT_TRUE(out_t.slice(i, i + 1).reshape({3, 5}).bitwise_equal(matmul(ati, bi, true, false))) << "entry " << i;
  }
}

// A batch of 1 serves every entry of the other operand's batch, as numpy's matmul broadcasts it:
// each entry is matmul's with that one matrix, and an empty batch gives an empty product.
TEST(BatchMatmul, ABatchOfOneServesEveryEntry) {
  std::vector<float> av(3 * 4), bv(3 * 4 * 5);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = std::sin(static_cast<float>(i)) * 0.7f;
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(static_cast<float>(i)) * 1.3f;
  const Tensor a = Tensor::from_vector<float>(av, {1, 3, 4}), b = Tensor::from_vector<float>(bv, {3, 4, 5});
  const Tensor out = batch_matmul(a, b);
  ASSERT_EQ(out.shape(), (Shape{3, 3, 5}));
  const Tensor bt = batch_matmul(b, a, true, true);  // b[i]^T (5, 4) @ a^T (4, 3)
  ASSERT_EQ(bt.shape(), (Shape{3, 5, 3}));
  for (std::int64_t i = 0; i < 3; ++i) {
    const Tensor bi = b.slice(i, i + 1).reshape({4, 5});
    EXPECT_TRUE(out.slice(i, i + 1).reshape({3, 5}).bitwise_equal(matmul(a.reshape({3, 4}), bi))) << i;
    EXPECT_TRUE(bt.slice(i, i + 1).reshape({5, 3}).bitwise_equal(matmul(bi, a.reshape({3, 4}), true, true))) << i;
  }
  EXPECT_EQ(batch_matmul(a, Tensor::zeros({0, 4, 5})).shape(), (Shape{0, 3, 5}));
}

TEST(BatchMatmul, MismatchedShapesNameBoth) {
  const Tensor a = Tensor::zeros({2, 3, 4}), b = Tensor::zeros({3, 4, 5}), c = Tensor::zeros({2, 5, 5});
  const std::string batch = test::message_of([&] { (void)batch_matmul(a, b); });
  EXPECT_NE(batch.find("(2, 3, 4)"), std::string::npos) << batch;
  EXPECT_NE(batch.find("(3, 4, 5)"), std::string::npos) << batch;
  const std::string inner = test::message_of([&] { (void)batch_matmul(a, c); });
  EXPECT_NE(inner.find("inner dimensions differ"), std::string::npos) << inner;
  EXPECT_THROW((void)batch_matmul(Tensor::zeros({3, 4}), Tensor::zeros({4, 5})), ValueError);
}

// transpose permutes the axes as numpy.transpose (scalars and empty tensors too) and refuses what
// is not a permutation, or more axes than its kernel takes, by name.
TEST(Transpose, PermutesTheAxesAsNumpyDoes) {
  std::vector<std::int64_t> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i);
  const Tensor x = Tensor::from_vector(v, Shape{2, 3, 4});
  const Tensor y = transpose(x, {2, 0, 1});
  ASSERT_EQ(y.shape(), Shape({4, 2, 3}));
  const auto got = y.to_vector<std::int64_t>();
  for (std::int64_t k = 0; k < 4; ++k)
    for (std::int64_t i = 0; i < 2; ++i)
      for (std::int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(got[static_cast<std::size_t>((k * 2 + i) * 3 + j)], (i * 3 + j) * 4 + k);
  EXPECT_EQ(transpose(Tensor::scalar(5.0), {}).to_vector<float>(), std::vector<float>{5.0f});
  EXPECT_EQ(transpose(Tensor::zeros({0, 3}), {1, 0}).shape(), Shape({3, 0}));
}

TEST(Transpose, WhatIsNotAPermutationOrHasTooManyAxesIsANamedError) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_EQ(message_of([&] { (void)transpose(x, {0, 0}); }), "transpose: (0, 0) is not a permutation of the 2 axes of (2, 3)");
  EXPECT_EQ(message_of([&] { (void)transpose(x, {1}); }), "transpose: (1) is not a permutation of the 2 axes of (2, 3)");
  const Tensor wide = Tensor::zeros(Shape(std::vector<std::int64_t>(9, 1)));
  EXPECT_EQ(message_of([&] { (void)transpose(wide, {8, 7, 6, 5, 4, 3, 2, 1, 0}); }),
            "transpose: (1, 1, 1, 1, 1, 1, 1, 1, 1) has 9 axes; at most 8 can be permuted");
}
