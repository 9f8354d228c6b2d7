// The fused first convolution + max pooling (conv2d_max_pool2d) against the two oneDNN-backed
// ops it replaces, on Keras' MNIST convnet's first layer: x (B, 28, 28, 1), Conv2D(32, 3x3,
// relu), MaxPooling2D(2x2). Forward, and the backward a training step runs (kernel and bias
// gradients; the model's input needs none). Rounds alternate fused and unfused; each one's median
// is printed with the ratio. Threads: the default context's (LOCKSTEP_CPU_THREADS).
//
//   build/bin/conv_pool_bench [batch] [rounds]   (defaults: 128, 15)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lockstep/lockstep.hpp"
#include "random_tensor.hpp"

using namespace lockstep;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double millis(F&& f, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}
}  // namespace

int main(int argc, char** argv) {
  const std::int64_t batch = argc > 1 ? std::atoll(argv[1]) : 128;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  constexpr int kReps = 20;
  const Tensor x = random_tensor({batch, 28, 28, 1}, 1), k = random_tensor({3, 3, 1, 32}, 2),
               b = random_tensor({32}, 3);
  const Conv2dOptions conv{.activation = FusedActivation::kRelu, .winograd = true};
  const Pool2dOptions pool{};
  if (!conv2d_max_pool2d_supported(x, k, b, conv, pool)) {
    std::printf("conv_pool_bench: no fused conv2d_max_pool2d kernel here (it needs AVX-512, and LOCKSTEP_CONV_ALGORITHM=direct leaves it out)\n");
    return 0;
  }
  const Tensor dy = random_tensor({batch, 13, 13, 32}, 4);
  Conv2dOptions plain = conv;
  plain.activation = FusedActivation::kNone;

  const auto unfused_forward = [&] { return max_pool2d(conv2d(x, k, b, conv), pool); };
  const auto fused_forward = [&] { return conv2d_max_pool2d(x, k, b, conv, pool); };
  // The backward as the tape runs it: pooling's gradient masked by the ReLU, then the kernel
  // and bias gradients; the fused op's from its saved window indices.
  const Tensor a = conv2d(x, k, b, conv), y = max_pool2d(a, pool);
  const auto unfused_backward = [&] {
    const Tensor da = pool2d_grad(true, a, y, dy, pool, /*relu_input=*/true);
    return conv2d_kernel_grad(x, da, k.shape(), true, plain);
  };
  Tensor fy, arg;
  {
    // The fused op's saved window indices come with its record: take them from a tape's view.
    struct Saved : OpRecorder {
      Tensor arg;
      bool wants(const Tensor* const*, int) const override { return true; }
      void record(const OpRecord& r) override { arg = r.saved[0]; }
    } saved;
    OpRecorder* previous = set_current_recorder(&saved);
    fy = fused_forward();
    set_current_recorder(previous);
    arg = saved.arg;
  }
  const auto fused_backward = [&] {
    return conv2d_max_pool2d_grad(x, k, true, fy, arg, dy, conv, pool.pool_size, {false, true, true});
  };

  std::vector<double> uf, ff, ub, fb;
  for (int r = 0; r < rounds; ++r) {
    uf.push_back(millis(unfused_forward, kReps));
    ff.push_back(millis(fused_forward, kReps));
    ub.push_back(millis(unfused_backward, kReps));
    fb.push_back(millis(fused_backward, kReps));
  }
  std::printf("conv2d(32, 3x3, relu) + max_pool2d(2x2) on (%lld, 28, 28, 1), medians of %d rounds x %d calls (ms)\n",
              static_cast<long long>(batch), rounds, kReps);
  std::printf("  forward:  unfused %.3f  fused %.3f  ratio %.2fx\n", median(uf), median(ff), median(uf) / median(ff));
  std::printf("  backward: unfused %.3f  fused %.3f  ratio %.2fx\n", median(ub), median(fb), median(ub) / median(fb));
  std::printf("  both:     unfused %.3f  fused %.3f  ratio %.2fx\n", median(uf) + median(ub), median(ff) + median(fb),
              (median(uf) + median(ub)) / (median(ff) + median(fb)));
  return 0;
}
