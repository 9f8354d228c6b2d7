// GPU benchmarks of issue 13, one process, gpu:0 (scripts/gpu_check.sh runs it and compares), in
// this order (the steps that acceptance reads first; a run cut off keeps them):
//   mlp      the flagship MLP (Dense(128, relu) -> Dropout(0.2) -> Dense(10, softmax), Adam,
//            784 inputs) on gpu:0, batches already on the device; steps/s at batch 64 and 1024,
//            timed over 1.5 s of steps after a warm-up
//   logical  the flagship at global batch 1024 on 4 logical replicas of gpu:0 (MirroredStrategy
//            over gpu:0x4), steps/s against one device
//   convnet  Keras' simple MNIST convnet (cuDNN convolutions) on gpu:0, batch 128, steps/s
//   gemm     cuBLASLt GEMM TFLOP/s (float32, bfloat16, float16) for the measured peak (the best
//            of large square GEMMs) and the GEMMs of interest at batch 1024 (the flagship's first
//            layer; a Dense(4096) layer of a big MLP); each with its share of that dtype's peak
//   allreduce  bus bandwidth of a float32 all-reduce among 4 logical replicas on gpu:0 (through
//            device memory), against the device's copy bandwidth (clone of a large tensor)
// Prints a table, and with --json one JSON object of the figures so far after each part (the
// last line holds them all). Without a GPU: exit 77. On emulated GPUs (LOCKSTEP_EMULATED_GPUS, the
// CPU's kernels) a smoke test: the same parts and figures' names, sizes / 16 and few steps.
//   gpu_bench [--json] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/devices.hpp"
#include "backend/kernels.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/tensor/kernel_launches.hpp"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {
const Device kGpu0{DeviceKind::kCuda, 0};
bool g_quick = false;
// A bare step's steps/s: timed over at least this many steps and seconds (a quarter with --quick).
constexpr int kMinSteps = 50;
constexpr double kSteadySeconds = 1.5;
std::int64_t g_shrink = 1;  // every size is divided by it (16 on emulated GPUs)
double g_kernels_per_step = 0;  // gpu:0's kernel launches per step of the last steps_per_second

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
// Waits for the GPU's stream (a one-element read orders after everything queued before it).
void sync(const Tensor& t) { (void)t.reshape({t.numel()}).slice(0, 1).to(Device{}); }

// Steps/s of `make`'s model at global batch `batch`, inputs of `shape` (per example), Adam(1e-3):
// on gpu:0 alone, or with `logical` > 1 on that many logical replicas of gpu:0 (MirroredStrategy
// over gpu:0xN, each replica a slice of the batch, gradients all-reduced through device memory).
double steps_per_second(const std::function<std::unique_ptr<Sequential>()>& make, const Shape& shape,
                        std::int64_t batch, int logical = 1) {
  std::unique_ptr<distribute::Strategy> owned;
  if (logical > 1) owned = std::make_unique<distribute::MirroredStrategy>(
                       distribute::MirroredOptions{.devices = {"gpu:0x" + std::to_string(logical)}});
  else owned = std::make_unique<distribute::OneDeviceStrategy>("gpu:0");
  distribute::Strategy& strategy = *owned;
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    set_random_seed(1);
    model = make();
    model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  }
  // 8 batches of MNIST-shaped random data, on the GPU (PyTorch's reference keeps them there too).
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<Tensor> xs, ys;
  Shape batch_shape{batch};
  std::int64_t per = 1;
  for (auto d : shape.dims()) batch_shape.dims().push_back(d), per *= d;
  {
    ComputeScope on(strategy.context(0));
    for (int i = 0; i < 8; ++i) {
      std::vector<float> xv(static_cast<std::size_t>(batch * per));
      std::vector<std::int64_t> yv(static_cast<std::size_t>(batch));
      for (auto& v : xv) v = u(rng);
      for (auto& v : yv) v = static_cast<std::int64_t>(rng() % 10);
      xs.push_back(Tensor::from_vector(xv, batch_shape));
      ys.push_back(Tensor::from_vector(yv, {batch}));
    }
  }
  // Timed over the steady state: at least kMinSteps and kSteadySeconds of steps after the warm-up
  // (every step reads the loss, so the clock sees the GPU's work), whatever a step costs.
  const int warmup = g_shrink > 1 ? 3 : 30, min_steps = g_shrink > 1 ? 20 : kMinSteps;
  const double steady = g_shrink > 1 ? 0.0 : g_quick ? kSteadySeconds / 4 : kSteadySeconds;
  for (int i = 0; i < warmup; ++i) (void)model->train_step(xs[i % 8], ys[i % 8]);
  const std::uint64_t kernels = detail::kernel_launches(kGpu0);
  const auto t0 = Clock::now();
  int steps = 0;
  while (steps < min_steps || seconds_since(t0) < steady) {
    (void)model->train_step(xs[steps % 8], ys[steps % 8]);  // reads the loss: syncs
    ++steps;
  }
  const double sps = steps / seconds_since(t0);
  g_kernels_per_step = static_cast<double>(detail::kernel_launches(kGpu0) - kernels) / steps;
  return sps;
}

std::unique_ptr<Sequential> flagship() {
  return std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
}
// Keras' simple MNIST convnet (PERFORMANCE section 9's model).
std::unique_ptr<Sequential> convnet() {
  return std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Input({28, 28, 1}), layers::Conv2D(32, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
      layers::Conv2D(64, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}), layers::Flatten(), layers::Dropout(0.5),
      layers::Dense(10, "softmax")});
}

// Uniform [0, 1) values from a cheap generator (xorshift), uploaded to the current device.
Tensor random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (auto& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
  }
  return Tensor::from_vector(v, {rows, cols});
}

double gemm_tflops(ComputeContext& ctx, DType dt, std::int64_t m, std::int64_t n, std::int64_t k) {
  ComputeScope on(ctx);
  m /= g_shrink, n /= g_shrink, k /= g_shrink;
  // Random operands: a constant or zero matrix draws less power and runs faster than real data
  // (PyTorch's reference multiplies torch.rand matrices).
  const Tensor a = random_matrix(m, k, 1).to(dt), b = random_matrix(k, n, 2).to(dt);
  Tensor c = Tensor::zeros({m, n}, dt);
  const auto& kt = backend::kernels(DeviceKind::kCuda, dt);
  auto once = [&] {
    kt.gemm(ctx, false, false, m, n, k, 1.0f, a.raw_data(), k, b.raw_data(), n, 0.0f, c.raw_data(), n);
  };
  for (int i = 0; i < 3; ++i) once();
  sync(c);
  const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int iters = static_cast<int>(std::clamp(2e12 / flop, 10.0, 2000.0)) / (g_quick ? 4 : 1) + 1;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) once();
  sync(c);
  return flop * iters / seconds_since(t0) / 1e12;
}

struct Bandwidth {
  double allreduce_busbw_gbs = 0, copy_gbs = 0;
};

Bandwidth allreduce_bandwidth(int members, std::int64_t numel) {
  Bandwidth r;
  const std::size_t bytes = static_cast<std::size_t>(numel) * sizeof(float);
  {
    const auto ctx = make_compute_context(kGpu0);
    ComputeScope on(*ctx);
    const Tensor src = Tensor::ones({numel});
    Tensor dst = src.clone();
    for (int i = 0; i < 2; ++i) dst.copy_from(src);
    sync(dst);
    const int iters = g_quick ? 5 : 20;
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) dst.copy_from(src);
    sync(dst);
    r.copy_gbs = 2.0 * static_cast<double>(bytes) * iters / seconds_since(t0) / 1e9;  // read + write
  }
  auto group = distribute::make_collective_group(distribute::CollectiveImplementation::kSharedMemory, members);
  std::vector<double> elapsed(static_cast<std::size_t>(members));
  std::vector<std::thread> threads;
  for (int m = 0; m < members; ++m) {
    threads.emplace_back([&, m] {
      const auto ctx = make_compute_context(kGpu0);
      ComputeScope on(*ctx);
      Tensor t = Tensor::ones({numel});
      auto& c = group->member(m);
      for (int i = 0; i < 2; ++i) c.all_reduce(t, ReduceOp::kSum)->wait();
      sync(t);
      c.barrier()->wait();
      const int iters = g_quick ? 5 : 20;
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) c.all_reduce(t, ReduceOp::kSum)->wait();
      sync(t);
      elapsed[static_cast<std::size_t>(m)] = seconds_since(t0) / iters;
    });
  }
  for (auto& t : threads) t.join();
  const double per = *std::max_element(elapsed.begin(), elapsed.end());
  // NCCL's bus bandwidth: algorithm bandwidth x 2 (n - 1) / n.
  r.allreduce_busbw_gbs = static_cast<double>(bytes) / per / 1e9 * 2.0 * (members - 1) / members;
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach gpu_check's log even if it is cut off
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--quick")) g_quick = true;
    else {
      std::fprintf(stderr, "usage: gpu_bench [--json] [--quick]\n");
      return 2;
    }
  }
  if (backend::device_kind(DeviceKind::kCuda).count() == 0) {
    std::fprintf(stderr, "gpu_bench: no GPU visible (or built without CUDA)\n");
    return 77;
  }
  std::printf("gpu_bench on %s\n", backend::list_local_devices().front().description.c_str());
  if (backend::device_kind(DeviceKind::kCuda).emulated()) {
    g_quick = true, g_shrink = 16;
    std::printf("  (LOCKSTEP_EMULATED_GPUS: a smoke test of this program; every figure below is the CPU's, "
                "with sizes / %lld and few steps)\n", static_cast<long long>(g_shrink));
  }
  std::map<std::string, double> out;
  // With --json, the figures so far as one JSON line after each part (the last line is the whole
  // run's): a part that hangs or fails past gpu_check's time limit loses only itself.
  auto emit = [&] {
    if (!json) return;
    std::string s = "{";
    for (const auto& [k, v] : out) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s\"%s\": %.4g", s.size() > 1 ? ", " : "", k.c_str(), v);
      s += buf;
    }
    std::printf("%s}\n", s.c_str());
    std::fflush(stdout);
  };
  for (std::int64_t b : {64, 1024}) {
    const double sps = steps_per_second(flagship, {784}, b);
    std::printf("  flagship MLP, batch %5lld: %9.1f steps/s, %.0f kernels/step\n", static_cast<long long>(b),
                sps, g_kernels_per_step);
    out["mlp_b" + std::to_string(b) + "_steps_per_s"] = sps;
    emit();
  }
  // The flagship at global batch 1024 on 4 logical replicas of gpu:0 (256 rows each), against
  // one device above: what sharing one GPU among replicas costs.
  const double logical_sps = steps_per_second(flagship, {784}, 1024, 4);
  std::printf("  flagship MLP, batch 1024 on 4 logical replicas of gpu:0: %9.1f steps/s (%.2fx one device)\n",
              logical_sps, logical_sps / out["mlp_b1024_steps_per_s"]);
  out["mlp_b1024_4logical_steps_per_s"] = logical_sps;
  emit();
  const double conv_sps = steps_per_second(convnet, {28, 28, 1}, 128);
  std::printf("  Keras' simple convnet, batch 128: %9.1f steps/s, %.0f kernels/step\n", conv_sps,
              g_kernels_per_step);
  out["convnet_b128_steps_per_s"] = conv_sps;
  emit();
  const auto ctx = make_compute_context(kGpu0);
  const std::pair<DType, const char*> dtypes[] = {{DType::kF32, "f32"}, {DType::kBF16, "bf16"}, {DType::kF16, "f16"}};
  for (const auto& [dt, name] : dtypes) {
    double peak = 0;
    for (std::int64_t s : {4096, 8192}) peak = std::max(peak, gemm_tflops(*ctx, dt, s, s, s));
    const double first = gemm_tflops(*ctx, dt, 1024, 128, 784);
    const double big = gemm_tflops(*ctx, dt, 1024, 4096, 4096);
    std::printf("  GEMM %-4s: measured peak %7.1f TFLOP/s; batch 1024: 1024x4096x4096 %7.1f (%3.0f%%), "
                "flagship 1024x128x784 %6.1f (%3.0f%%)\n",
                name, peak, big, 100 * big / peak, first, 100 * first / peak);
    out[std::string("gemm_") + name + "_peak_tflops"] = peak;
    out[std::string("gemm_") + name + "_b1024_4096_tflops"] = big;
    out[std::string("gemm_") + name + "_b1024_flagship_tflops"] = first;
    emit();
  }
  const Bandwidth bw = allreduce_bandwidth(4, (std::int64_t{64} << 20) / g_shrink);  // 256 MiB of float32
  std::printf("  all-reduce, 4 logical replicas on gpu:0, 256 MiB: bus bandwidth %7.1f GB/s; device copy "
              "bandwidth %7.1f GB/s (%3.0f%%)\n",
              bw.allreduce_busbw_gbs, bw.copy_gbs, 100 * bw.allreduce_busbw_gbs / bw.copy_gbs);
  out["allreduce_4_logical_busbw_gbs"] = bw.allreduce_busbw_gbs;
  out["device_copy_gbs"] = bw.copy_gbs;
  emit();
  return 0;
}
