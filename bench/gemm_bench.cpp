// Why GEMM comes from oneDNN: single-threaded sgemm on the flagship MLP's shapes (batch 64),
// oneDNN vs OpenBLAS, in the same process. Google Benchmark; compare the pairs of rows.
// BM_Layout: the wide MLP's GEMMs (batch 256, hidden 1024 and 4096) on buffers laid out as
// lockstep lays them out (Tensor::empty: 64-byte aligned, coloured), one thread, three ways:
// /0 oneDNN's sgemm on them as they are, /1 the same with B moved to a 16-byte offset, /2
// lockstep's gemm kernel (what a step runs). std::vector's buffers (BM_OneDnn) sit at other
// offsets and can hide what the layout costs (issue 38: 2.3x on oneDNN's AVX2 sgemm).
// --mlp IN,HIDDEN,OUT --batch B [--threads T] adds BM_Step: the five GEMMs of one training step
// of that MLP (forward of both Dense layers, the hidden layer's input gradient, both kernel
// gradients) through lockstep's gemm on a pool of T threads, on lockstep's buffers: its "bound"
// counter is the steps/s that GEMM alone allows (bench/compare_cores.sh's sgemm peak).
#include <benchmark/benchmark.h>
#include <dnnl.h>
#include <omp.h>

#include <cstdio>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/tensor.hpp"

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
// m, n, k, ta, tb of the wide MLP (784 -> H -> 10, batch 256): forward dense_1, forward dense_2,
// dX2 = g W2^T, dW2 = h^T g, dW1 = x^T g; H = 1024, then 4096.
const Shape kWide[] = {{256, 1024, 784, false, false}, {256, 10, 1024, false, false}, {256, 1024, 10, false, true},
                       {1024, 10, 256, true, false},   {784, 1024, 256, true, false}, {256, 4096, 784, false, false},
                       {256, 10, 4096, false, false},  {256, 4096, 10, false, true},  {4096, 10, 256, true, false},
                       {784, 4096, 256, true, false}};

void BM_Layout(benchmark::State& state) {
  using lockstep::Tensor;
  const Shape s = kWide[state.range(0)];
  const int way = static_cast<int>(state.range(1));
  omp_set_num_threads(1);
  Tensor a = Tensor::full({s.m * s.k}, 0.5), b = Tensor::full({s.k * s.n + 4}, 0.25), c = Tensor::empty({s.m * s.n});
  const float* bp = b.data<float>() + (way == 1 ? 4 : 0);
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const auto& kt = lockstep::backend::kernels(lockstep::DeviceKind::kCpu, lockstep::DType::kF32);
  static const auto ctx1 = lockstep::make_compute_context(lockstep::Device{}, 1);
  auto& ctx = *ctx1;
  for (auto _ : state) {
    if (way == 2)
      kt.gemm(ctx, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data<float>(), lda, bp, ldb, 0.0f, c.data<float>(), s.n);
    else
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data<float>(), lda, bp, ldb, 0.0f,
                 c.data<float>(), s.n);
    benchmark::DoNotOptimize(c.data<float>());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  const char* ways[] = {"as laid out", "B at +16 bytes", "lockstep gemm"};
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + (s.ta ? " T" : " N") +
                 (s.tb ? "T " : "N ") + ways[way]);
}
BENCHMARK(BM_Layout)->ArgsProduct({benchmark::CreateDenseRange(0, 9, 1), {0, 1, 2}});

void BM_OneDnn(benchmark::State& state) { run(state, true); }
BENCHMARK(BM_OneDnn)->DenseRange(0, 4);
#ifdef LOCKSTEP_BENCH_OPENBLAS
void BM_OpenBlas(benchmark::State& state) { run(state, false); }
BENCHMARK(BM_OpenBlas)->DenseRange(0, 4);
#endif
struct Step {
  std::int64_t in = 0, hidden = 0, out = 0, batch = 0;
  int threads = 1;
};

void BM_Step(benchmark::State& state, Step st) {
  using lockstep::Tensor;
  omp_set_num_threads(1);
  const std::int64_t b = st.batch, h = st.hidden;
  const Shape shapes[] = {{int(b), int(h), int(st.in), false, false}, {int(b), int(st.out), int(h), false, false},
                          {int(b), int(h), int(st.out), false, true},  {int(h), int(st.out), int(b), true, false},
                          {int(st.in), int(h), int(b), true, false}};
  struct Buffers {
    Tensor a, b, c;
  };
  std::vector<Buffers> bufs;
  double flops = 0;
  for (const Shape& s : shapes) {
    bufs.push_back({Tensor::full({std::int64_t{s.m} * s.k}, 0.5), Tensor::full({std::int64_t{s.k} * s.n}, 0.25),
                    Tensor::empty({std::int64_t{s.m} * s.n})});
    flops += 2.0 * s.m * s.n * s.k;
  }
  const auto& kt = lockstep::backend::kernels(lockstep::DeviceKind::kCpu, lockstep::DType::kF32);
  const auto ctx = lockstep::make_compute_context(lockstep::Device{}, st.threads);
  for (auto _ : state) {
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      const Shape& s = shapes[i];
      kt.gemm(*ctx, s.ta, s.tb, s.m, s.n, s.k, 1.0f, bufs[i].a.data<float>(), s.ta ? s.m : s.k,
              bufs[i].b.data<float>(), s.tb ? s.k : s.n, 0.0f, bufs[i].c.data<float>(), s.n);
    }
    benchmark::DoNotOptimize(bufs.back().c.data<float>());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["bound"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// Takes --mlp, --batch and --threads out of argv; false (with a message) on a malformed value.
bool parse_step(int& argc, char** argv, Step& st) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if ((k == "--mlp" || k == "--batch" || k == "--threads") && i + 1 < argc) {
      const char* v = argv[++i];
      char* end = nullptr;
      if (k == "--mlp") {
        st.in = std::strtoll(v, &end, 10);
        if (*end == ',') st.hidden = std::strtoll(end + 1, &end, 10);
        if (*end == ',') st.out = std::strtoll(end + 1, &end, 10);
      } else if (k == "--batch") {
        st.batch = std::strtoll(v, &end, 10);
      } else {
        st.threads = static_cast<int>(std::strtol(v, &end, 10));
      }
      if (*end != '\0' || st.threads < 1 || (k == "--mlp" && (st.in < 1 || st.hidden < 1 || st.out < 1))) {
        std::fprintf(stderr, "gemm_bench: bad value '%s' for %s (--mlp IN,HIDDEN,OUT --batch B --threads T)\n", v,
                     k.c_str());
        return false;
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  Step st;
  if (!parse_step(argc, argv, st)) return 2;
  if (st.hidden > 0) {
    if (st.batch < 1) {
      std::fprintf(stderr, "gemm_bench: --mlp needs --batch B (B >= 1)\n");
      return 2;
    }
    const std::string name = "BM_Step/mlp:" + std::to_string(st.in) + "," + std::to_string(st.hidden) + "," +
                             std::to_string(st.out) + "/batch:" + std::to_string(st.batch) +
                             "/threads:" + std::to_string(st.threads);
    benchmark::RegisterBenchmark(name.c_str(), BM_Step, st)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
