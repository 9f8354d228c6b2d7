// One image resize's training cost under lockstep: resize_images (Resizing's and UpSampling2D's
// one resize) forward and its backward to the images, as a tape runs them in a training step.
// bench/compare_resize.sh runs it beside TensorFlow and PyTorch on the same shapes.
//
//   build/bin/resize_bench N H W C OUT_H OUT_W METHOD ANTIALIAS(0|1) REPS
// Prints the median milliseconds of REPS forward + backward passes (after one to warm up).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lockstep/layers/image_resize.hpp"
#include "lockstep/lockstep.hpp"
#include "random_tensor.hpp"
#include "median.hpp"

using namespace lockstep;

namespace {
std::int64_t positive(const char* arg, const char* what) {
  const long long v = std::atoll(arg);
  if (v <= 0) {
    std::fprintf(stderr, "resize_bench: %s must be a positive integer, got '%s'\n", what, arg);
    std::exit(2);
  }
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: resize_bench N H W C OUT_H OUT_W METHOD ANTIALIAS(0|1) REPS\n");
    return 2;
  }
  const char* names[] = {"N", "H", "W", "C", "OUT_H", "OUT_W"};
  std::vector<std::int64_t> d;
  for (int i = 0; i < 6; ++i) d.push_back(positive(argv[i + 1], names[i]));
  const std::string antialias = argv[8];
  if (antialias != "0" && antialias != "1") {
    std::fprintf(stderr, "resize_bench: ANTIALIAS must be 0 or 1, got '%s'\n", argv[8]);
    return 2;
  }
  const auto reps = static_cast<int>(positive(argv[9], "REPS"));
  try {
    const layers::Interpolation method = layers::parse_interpolation(argv[7], "resize_bench");
    const Tensor x = random_tensor({d[0], d[1], d[2], d[3]}, 1);
    const Tensor dy = random_tensor({d[0], d[4], d[5], d[3]}, 2);
    const auto step = [&] {
      GradientTape tape;
      tape.watch(x);
      const Tensor y = layers::resize_images(x, d[4], d[5], method, antialias == "1");
      return tape.gradient(y, std::vector<Tensor>{x}, dy)[0];
    };
    (void)step();
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor g = step();
      (void)g.to_vector<float>();  // the gradient is in host memory: the whole pass has run
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%.4f\n", median(ms));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resize_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
