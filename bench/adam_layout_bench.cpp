// Adam's update over the flagship's 784 x 128 kernel (100,352 floats) with its four arrays
// (variable, two moments, gradient) placed at chosen offsets within their pages: the layouts
// that put every stream in the same cache sets against spread ones (DESIGN-NOTES, "No two
// streams of an elementwise kernel in the same cache sets"). Runs the CPU kernel on the
// default context (LOCKSTEP_CPU_THREADS applies), 200 warm-up and 3000 timed updates per
// layout, and prints microseconds per update.
//
//   adam_layout_bench [N]   (N floats per array, default 100352)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/context.hpp"
#include "backend/cpu/cpu_kernels.hpp"

using namespace lockstep::backend;

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 100352;
  if (n < 1) {
    std::fprintf(stderr, "usage: adam_layout_bench [N]\n");
    return 2;
  }
  const long stride = (n * 4 / 4096 + 2) * 4096;  // page-aligned room for one array and an offset
  char* base = static_cast<char*>(std::aligned_alloc(4096, static_cast<std::size_t>(4 * stride)));
  if (!base) return 1;
  std::memset(base, 0, static_cast<std::size_t>(4 * stride));
  const AdamStep s{.one_minus_b1 = 0.1f, .one_minus_b2 = 0.001f, .epsilon = 1e-7f};
  StepBlock block;
  block.scalars.alpha = 1e-3f;
  auto& ctx = current_context();
  struct Layout {
    const char* what;
    int offset[4];  // bytes into the page: variable, first moment, second moment, gradient
  };
  const Layout layouts[] = {{"all at one page offset", {0, 0, 0, 0}},
                            {"gradient 1 KiB apart", {0, 0, 0, 1024}},
                            {"each 1 KiB apart", {0, 1024, 2048, 3072}},
                            {"each 512 B apart", {0, 512, 1024, 1536}},
                            {"two pairs", {0, 0, 1024, 1024}},
                            {"each 64 B apart", {0, 64, 128, 192}}};
  std::printf("adam_update over %ld floats on %d thread(s)\n", n, ctx.threads());
  for (const Layout& l : layouts) {
    float* a[4];
    for (int k = 0; k < 4; ++k) a[k] = reinterpret_cast<float*>(base + k * stride + l.offset[k]);
    for (long i = 0; i < n; ++i) {
      a[0][i] = 0.01f * static_cast<float>(i % 7);
      a[3][i] = 0.001f * static_cast<float>(i % 5);
    }
    for (int r = 0; r < 200; ++r) cpu::adam_update(ctx, a[0], a[1], a[2], a[3], n, s, &block);
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kTimed = 3000;
    for (int r = 0; r < kTimed; ++r) cpu::adam_update(ctx, a[0], a[1], a[2], a[3], n, s, &block);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kTimed;
    std::printf("  %-24s %7.1f us per update\n", l.what, us);
  }
  std::free(base);
  return 0;
}
