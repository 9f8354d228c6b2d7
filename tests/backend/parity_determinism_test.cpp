// Determinism rows. Every parity row already checks that a second run on the same context
// gives the same bits. Here: GEMM split over a pool. gemm.cpp promises a fixed summation order
// for a given pool size (so bit-identical results on any context of that size); across pool
// sizes the blocks oneDNN sees differ and nothing is promised, so there only the float32
// tolerance is asserted (and whether the bits happen to agree is printed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/parity.hpp"

namespace lockstep::parity {

namespace {
Tensor random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v, {rows, cols});
}

struct GemmCase {
  const char* name;
  std::int64_t m, k, n;
  bool ta, tb;
};
// 6.3 MFLOP with m >= n: C's rows are split over the pool; 3.6 MFLOP with m < n and m < 8 *
// threads: its columns are.
const GemmCase kCases[] = {{"rows_nn", 256, 128, 96, false, false}, {"rows_tt", 256, 128, 96, true, true},
                           {"cols_nn", 12, 300, 500, false, false}, {"cols_tn", 12, 300, 500, true, false}};

Tensor run_gemm(ComputeContext& ctx, const GemmCase& c, const Tensor& a, const Tensor& b, const Tensor& bias) {
  ComputeScope scope(ctx);
  if (bias.defined()) return dense(a, b, bias, FusedActivation::kRelu);
  return matmul(a, b, c.ta, c.tb);
}
}  // namespace

TEST(ParityDeterminism, GemmIsBitIdenticalForAGivenPoolSizeAndCloseAcrossSizes) {
  const auto one = make_compute_context(Device{}, 1);
  const auto two = make_compute_context(Device{}, 2);
  const auto other_two = make_compute_context(Device{}, 2);
  for (const GemmCase& c : kCases) {
    for (bool fused : {false, true}) {
      if (fused && (c.ta || c.tb)) continue;
      SCOPED_TRACE(std::string(c.name) + (fused ? " dense+bias+relu" : " matmul"));
      const Tensor a = c.ta ? random_matrix(c.k, c.m, 1) : random_matrix(c.m, c.k, 1);
      const Tensor b = c.tb ? random_matrix(c.n, c.k, 2) : random_matrix(c.k, c.n, 2);
      const Tensor bias = fused ? random_matrix(1, c.n, 3).reshape({c.n}) : Tensor();
      const Tensor r2 = run_gemm(*two, c, a, b, bias);
      EXPECT_TRUE(run_gemm(*two, c, a, b, bias).bitwise_equal(r2)) << "same context, second run";
      EXPECT_TRUE(run_gemm(*other_two, c, a, b, bias).bitwise_equal(r2)) << "another context of the same size";
      const Tensor r1 = run_gemm(*one, c, a, b, bias);
      EXPECT_TRUE(run_gemm(*one, c, a, b, bias).bitwise_equal(r1)) << "one thread, second run";
      // Across pool sizes: float32's tolerance for a k-term dot product of values in [-1, 1].
      const std::vector<float> x1 = r1.to_vector<float>(), x2 = r2.to_vector<float>();
      ASSERT_EQ(x1.size(), x2.size());
      double worst = 0;
      for (std::size_t i = 0; i < x1.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(x1[i]) - x2[i]));
      EXPECT_LE(worst, kAccumulationRel * static_cast<double>(c.k) + tolerance(DType::kF32).abs);
      std::printf("[ gemm %s%s ] 1 vs 2 threads: %s (max |diff| %g)\n", c.name, fused ? " dense" : "",
                  r1.bitwise_equal(r2) ? "bit-identical" : "differ in the last bits", worst);
    }
  }
}

// A B whose rows are 4 KiB apart (a 1024-wide Dense kernel) is copied by gemm.cpp to padded rows
// where oneDNN's AVX2 sgemm would read it in place through aliasing cache sets (ctest runs this
// test once more as backend.gemm_b_rows_4k_apart_avx2, with oneDNN capped at AVX2, where the copy
// happens). Either way the product must be the bits of the same B at a stride that aliases
// nothing (1040 floats), on one thread and split over a pool by rows and by columns, for a B that
// is a column block of a wider matrix too, and with alpha and beta.
TEST(ParityDeterminism, GemmWithBRowsFourKibApartGivesTheBitsOfAnUnaliasedStride) {
  const backend::KernelTable& kt = backend::kernels(DeviceKind::kCpu, DType::kF32);
  const auto one = make_compute_context(Device{}, 1);
  const auto two = make_compute_context(Device{}, 2);
  struct Case {
    std::int64_t m, k, n;
    float alpha, beta;
  };
  // rows split on two threads; columns split; n a block of B's 1024 columns; alpha and beta.
  const Case cases[] = {
      {96, 300, 1024, 1, 0}, {12, 300, 1024, 1, 0}, {64, 200, 1000, 1, 0}, {40, 100, 1024, 0.5f, 0.25f}};
  constexpr std::int64_t kAliased = 1024, kUnaliased = 1040;
  for (const Case& c : cases) {
    const std::vector<float> a = random_matrix(c.m, c.k, 7).to_vector<float>();
    const std::vector<float> b = random_matrix(c.k, kAliased, 8).to_vector<float>();
    const std::vector<float> c0 = random_matrix(c.m, c.n, 9).to_vector<float>();
    std::vector<float> b_unaliased(static_cast<std::size_t>(c.k * kUnaliased), 0.0f);
    for (std::int64_t r = 0; r < c.k; ++r)
      std::copy_n(b.begin() + r * kAliased, kAliased, b_unaliased.begin() + r * kUnaliased);
    for (backend::ComputeContext* ctx : {one.get(), two.get()}) {
      SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " on " +
                   std::to_string(context_threads(*ctx)) + " thread(s)");
      std::vector<float> got = c0, want = c0;
      kt.gemm(*ctx, false, false, c.m, c.n, c.k, c.alpha, a.data(), c.k, b.data(), kAliased, c.beta, got.data(), c.n);
      kt.gemm(*ctx, false, false, c.m, c.n, c.k, c.alpha, a.data(), c.k, b_unaliased.data(), kUnaliased, c.beta,
              want.data(), c.n);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
      // And the product itself: one element per row against a double-precision dot product.
      for (std::int64_t i = 0; i < c.m; ++i) {
        const std::int64_t j = (i * 37) % c.n;
        double ref = 0;
        for (std::int64_t p = 0; p < c.k; ++p) ref += static_cast<double>(a[i * c.k + p]) * b[p * kAliased + j];
        ref = c.alpha * ref + c.beta * static_cast<double>(c0[i * c.n + j]);
        EXPECT_NEAR(got[i * c.n + j], ref, kAccumulationRel * static_cast<double>(c.k) + 1e-5) << i << "," << j;
      }
    }
  }
}

// BatchNormalization's per-channel sums are over a fixed partition of the rows, added in order:
// the same bits on one thread as on the pool (what SyncBatchNorm's "N replicas = one device"
// and a resumed run's bit-identity lean on).
TEST(ParityDeterminism, BatchNormSumsAreBitIdenticalOnOneThreadAndOnThePool) {
  const std::int64_t rows = 4099, cols = 33;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> xv(static_cast<std::size_t>(rows * cols)), gv(xv.size()), mv(static_cast<std::size_t>(cols));
  for (float& v : xv) v = u(rng);
  for (float& v : gv) v = u(rng);
  for (float& v : mv) v = u(rng) * 0.25f;
  // Channel 0 of dy cancels: 1e16 first, -1e16 last, ones between. Even in double, 1e16 + 1 is
  // 1e16, so that sum depends on the order in which the rows are added, visibly in float32: a
  // partition that followed the pool's chunks would give other bits.
  for (std::int64_t r = 0; r < rows; ++r)
    gv[static_cast<std::size_t>(r * cols)] = r == 0 ? 1e16f : r == rows - 1 ? -1e16f : 1.0f;
  const Tensor x = Tensor::from_vector(xv, {rows, cols}), dy = Tensor::from_vector(gv, {rows, cols});
  const Tensor mean = Tensor::from_vector(mv, {cols}), inv_std = Tensor::full({cols}, 0.75);
  const auto sums = [&] {
    const auto g = batch_norm_grad_sums(dy, x, mean, inv_std);
    return std::array<Tensor, 3>{batch_norm_squared_deviations(x, mean), g[0], g[1]};
  };
  std::array<Tensor, 3> pooled;
  {
    ComputeScope scope(context_of(DeviceKind::kCpu));
    ASSERT_GT(context_of(DeviceKind::kCpu).threads(), 1);
    pooled = sums();
  }
  const auto one = make_compute_context(Device{}, 1);
  ComputeScope scope(*one);
  const std::array<Tensor, 3> serial = sums();
  for (std::size_t i = 0; i < serial.size(); ++i) EXPECT_TRUE(serial[i].bitwise_equal(pooled[i])) << "sum " << i;
}

TEST(ParityDeterminism, RowsAgreeOnOneThreadAndOnThePool) {
  // The harness runs rows on a 3-thread pool; the serial paths (one thread, the same inputs)
  // must give results within the same tolerance of it. Bits are not compared (GEMM differs).
  const auto one = make_compute_context(Device{}, 1);
  int compared = 0;
  for (const Row& row : all_rows()) {
    if (row.check || !supported(row, DeviceKind::kCpu, DType::kF32) ||
        std::find(row.accepts.begin(), row.accepts.end(), DType::kF32) == row.accepts.end())
      continue;
    SCOPED_TRACE(row.name());
    std::vector<Tensor> in;
    std::vector<Tensor> pooled;
    {
      ComputeScope scope(context_of(DeviceKind::kCpu));
      in = make_inputs(row, DType::kF32);
      pooled = row.run(in, DType::kF32);
    }
    ComputeScope scope(*one);
    const std::vector<Tensor> serial = row.run(in, DType::kF32);
    std::vector<Host> hin;
    for (const Tensor& t : in) hin.push_back(to_host(t));
    const std::vector<Expected> want = row.ref(hin, DType::kF32);
    for (std::size_t i = 0; i < serial.size(); ++i) {
      Expected e = want[i];
      e.v = to_host(pooled[i]).v;
      compare(e, to_host(serial[i]), row.match, "serial output " + std::to_string(i) + " against the pool's");
    }
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

}  // namespace lockstep::parity
