// Why GEMM comes from oneDNN: single-threaded sgemm on the flagship MLP's shapes (batch 64),
// oneDNN vs OpenBLAS, in the same process. Google Benchmark; compare the pairs of rows.
#include <benchmark/benchmark.h>
#include <dnnl.h>
#include <omp.h>

#include <vector>

#ifdef LOCKSTEP_BENCH_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {
struct Shape {
  int m, n, k;
  bool ta, tb;
};
// forward dense_1, forward dense_2, dW1 = x^T g, dX2 = g W2^T, dW2 = h^T g
const Shape kShapes[] = {{64, 128, 784, false, false}, {64, 10, 128, false, false}, {784, 128, 64, true, false},
                         {64, 128, 10, false, true},   {128, 10, 64, true, false}};

void run(benchmark::State& state, bool onednn) {
  const Shape s = kShapes[state.range(0)];
  omp_set_num_threads(1);
#ifdef LOCKSTEP_BENCH_OPENBLAS
  openblas_set_num_threads(1);
#endif
  std::vector<float> a(static_cast<std::size_t>(s.m) * s.k, 0.5f), b(static_cast<std::size_t>(s.k) * s.n, 0.25f),
      c(static_cast<std::size_t>(s.m) * s.n);
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  for (auto _ : state) {
    if (onednn) {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(),
                 s.n);
    } else {
#ifdef LOCKSTEP_BENCH_OPENBLAS
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                  1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
#endif
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + (s.ta ? " T" : " N") +
                 (s.tb ? "T" : "N"));
}
void BM_OneDnn(benchmark::State& state) { run(state, true); }
BENCHMARK(BM_OneDnn)->DenseRange(0, 4);
#ifdef LOCKSTEP_BENCH_OPENBLAS
void BM_OpenBlas(benchmark::State& state) { run(state, false); }
BENCHMARK(BM_OpenBlas)->DenseRange(0, 4);
#endif
}  // namespace

BENCHMARK_MAIN();
