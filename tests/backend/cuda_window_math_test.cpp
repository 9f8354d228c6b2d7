// The CUDA backend's pooling and convolution-layout kernels compute each element with the
// host+device functions of src/backend/cuda/window_math.hpp. Here those same functions run on the
// host, element by element, against the CPU backend's kernels: their index arithmetic, the
// first-maximum rule of max pooling's gradient, the ReLU-masked windows, average pooling's
// count without padding, and the explicit padding / cropping / kernel transposes that the cuDNN
// convolution wraps around cuDNN's symmetric-padding, KRSC-kernel calls. Runs without a GPU;
// on a GPU the parity rows (gpu.parity_cuda) check the kernels themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/window_math.hpp"
#include "backend/kernels.hpp"

namespace lockstep::backend {
namespace {

const KernelTable& cpu() { return kernels(DeviceKind::kCpu, DType::kF32); }
ComputeContext& ctx() { return default_cpu_context(); }

std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t dil, std::int64_t p0,
                      std::int64_t p1) {
  return (in + p0 + p1 - ((k - 1) * dil + 1)) / s + 1;
}

// Small integers: many ties inside windows, so the first-maximum rule is exercised.
std::vector<float> ties(std::int64_t n, unsigned seed, int lo = -3, int hi = 3) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = static_cast<float>(u(g));
  return v;
}
std::vector<float> normal(std::int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = u(g);
  return v;
}

struct PoolCase {
  const char* name;
  Pool2dDesc d;
};
Pool2dDesc pool(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k, std::int64_t s,
                std::int64_t pt, std::int64_t pl, std::int64_t pb, std::int64_t pr, bool max, bool relu = false) {
  Pool2dDesc d{.n = n, .h = h, .w = w, .c = c, .kh = k, .kw = k, .stride_h = s, .stride_w = s,
               .pad_top = pt, .pad_left = pl, .pad_bottom = pb, .pad_right = pr, .max = max, .relu_input = relu};
  d.oh = out_size(h, k, s, 1, pt, pb);
  d.ow = out_size(w, k, s, 1, pl, pr);
  return d;
}

TEST(CudaWindowMath, PoolingMatchesTheCpuBackendElementByElement) {
  const PoolCase cases[] = {
      {"max 2x2/2 (Keras' default, odd input)", pool(3, 7, 9, 5, 2, 2, 0, 0, 0, 0, true)},
      {"max 3x3/2 'same' (asymmetric padding, overlapping)", pool(2, 8, 7, 3, 3, 2, 0, 1, 1, 1, true)},
      {"max 3x3/1 padded, windows overlap a lot", pool(2, 6, 6, 4, 3, 1, 1, 1, 1, 1, true)},
      {"max 2x2/2 after a ReLU", pool(2, 6, 8, 17, 2, 2, 0, 0, 0, 0, true, true)},
      {"max 3x3/2 after a ReLU, overlapping", pool(2, 9, 9, 3, 3, 2, 1, 1, 1, 1, true, true)},
      {"average 3x3/2 padded (count excludes padding)", pool(2, 7, 8, 3, 3, 2, 1, 1, 1, 1, false)},
      {"average 2x2/2", pool(1, 6, 6, 8, 2, 2, 0, 0, 0, 0, false)},
  };
  for (const auto& [name, d] : cases) {
    SCOPED_TRACE(name);
    const std::int64_t nx = d.n * d.h * d.w * d.c, ny = d.n * d.oh * d.ow * d.c;
    // ReLU outputs for relu_input (zeros and positives), small integers with ties otherwise.
    std::vector<float> x = ties(nx, 7, d.relu_input ? -2 : -3, 3);
    if (d.relu_input)
      for (auto& v : x) v = v > 0 ? v : 0.0f;
    const std::vector<float> dy = normal(ny, 11);
    std::vector<float> y_cpu(static_cast<std::size_t>(ny)), dx_cpu(static_cast<std::size_t>(nx));
    cpu().pool2d(ctx(), d, x.data(), y_cpu.data());
    cpu().pool2d_backward(ctx(), d, x.data(), y_cpu.data(), dy.data(), dx_cpu.data());
    for (std::int64_t i = 0; i < ny; ++i) {
      const float got = cuda::window::pool_forward_at(d, x.data(), i);
      if (d.max) ASSERT_EQ(got, y_cpu[static_cast<std::size_t>(i)]) << "forward element " << i;
      else ASSERT_NEAR(got, y_cpu[static_cast<std::size_t>(i)], 1e-6) << "forward element " << i;
    }
    int positive_windows = 0;
    for (float v : y_cpu) positive_windows += v > 0;
    ASSERT_GT(positive_windows, 0);
    for (std::int64_t i = 0; i < nx; ++i) {
      const float got = cuda::window::pool_backward_at(d, x.data(), y_cpu.data(), dy.data(), i);
      // Max: one add per window in (oy, ox) order, as the CPU's: the same bits.
      if (d.max) ASSERT_EQ(got, dx_cpu[static_cast<std::size_t>(i)]) << "gradient element " << i;
      else ASSERT_NEAR(got, dx_cpu[static_cast<std::size_t>(i)], 1e-6) << "gradient element " << i;
    }
  }
}

// Max pooling of a window holding a NaN is NaN, wherever the NaN is in it; of a window of -inf,
// -inf (oneDNN's pooling, which the CPU used, skipped the NaN and gave -FLT_MAX for either). The
// gradient of a NaN window goes to its first NaN, the element that gave the output (it went to
// no element), of a window of -inf to its first element.
TEST(CudaWindowMath, MaxPoolingOfANanIsNanOnBothBackends) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  const Pool2dDesc d = pool(1, 2, 8, 17, 2, 2, 0, 0, 0, 0, true);  // 4 windows of 2x2, 17 channels
  std::vector<float> x(static_cast<std::size_t>(2 * 8 * 17), 1.0f);
  const auto at = [&](std::int64_t row, std::int64_t col, std::int64_t ch) -> float& {
    return x[static_cast<std::size_t>((row * 8 + col) * 17 + ch)];
  };
  for (std::int64_t ch = 0; ch < 17; ++ch) {
    at(0, 0, ch) = kNan;                  // window 0: a NaN first
    at(1, 3, ch) = kNan;                  // window 1: a NaN last, after a larger value
    at(0, 2, ch) = 5.0f;
    for (std::int64_t r = 0; r < 2; ++r)  // window 2: -inf only
      for (std::int64_t col = 4; col < 6; ++col) at(r, col, ch) = -kInf;
  }
  std::vector<float> y_cpu(static_cast<std::size_t>(4 * 17));
  cpu().pool2d(ctx(), d, x.data(), y_cpu.data());
  for (std::int64_t ch = 0; ch < 17; ++ch) {
    for (std::int64_t w = 0; w < 4; ++w) {
      const std::int64_t i = w * 17 + ch;
      const float cpu_y = y_cpu[static_cast<std::size_t>(i)], cuda_y = cuda::window::pool_forward_at(d, x.data(), i);
      if (w < 2) {
        EXPECT_TRUE(std::isnan(cpu_y) && std::isnan(cuda_y)) << "window " << w << ": " << cpu_y << ", " << cuda_y;
      } else {
        EXPECT_EQ(cpu_y, w == 2 ? -kInf : 1.0f) << "window " << w;
        EXPECT_EQ(cuda_y, cpu_y) << "window " << w;
      }
    }
  }
  std::vector<float> dy(y_cpu.size()), dx_cpu(x.size());
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0f + static_cast<float>(i);
  cpu().pool2d_backward(ctx(), d, x.data(), y_cpu.data(), dy.data(), dx_cpu.data());
  // Each window's gradient at the element that gave its maximum: (row, column) of windows 0-3.
  const std::int64_t gave[4][2] = {{0, 0}, {1, 3}, {0, 4}, {0, 6}};
  for (std::int64_t ch = 0; ch < 17; ++ch) {
    for (std::int64_t row = 0; row < 2; ++row)
      for (std::int64_t col = 0; col < 8; ++col) {
        const std::int64_t i = (row * 8 + col) * 17 + ch, w = col / 2;
        const bool gets = gave[w][0] == row && gave[w][1] == col;
        const float want = gets ? dy[static_cast<std::size_t>(w * 17 + ch)] : 0.0f;
        const std::string where = "row " + std::to_string(row) + " column " + std::to_string(col) + " channel " +
                                  std::to_string(ch);
        EXPECT_EQ(dx_cpu[static_cast<std::size_t>(i)], want) << "cpu: " << where;
        EXPECT_EQ(cuda::window::pool_backward_at(d, x.data(), y_cpu.data(), dy.data(), i), want) << "cuda: " << where;
      }
  }
}

Conv2dDesc conv(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t oc, std::int64_t k,
                std::int64_t s, std::int64_t dil, std::int64_t pt, std::int64_t pl, std::int64_t pb,
                std::int64_t pr, std::int64_t groups = 1) {
  Conv2dDesc d{.n = n, .h = h, .w = w, .c = c, .oc = oc, .kh = k, .kw = k, .stride_h = s, .stride_w = s,
               .dilation_h = dil, .dilation_w = dil, .pad_top = pt, .pad_left = pl, .pad_bottom = pb,
               .pad_right = pr, .groups = groups};
  d.oh = out_size(h, k, s, dil, pt, pb);
  d.ow = out_size(w, k, s, dil, pl, pr);
  return d;
}

std::vector<float> window_copy(const std::vector<float>& src, std::int64_t n, std::int64_t sh, std::int64_t sw,
                               std::int64_t dh, std::int64_t dw, std::int64_t c, std::int64_t oy, std::int64_t ox) {
  std::vector<float> dst(static_cast<std::size_t>(n * dh * dw * c));
  for (std::int64_t i = 0; i < n * dh * dw * c; ++i) {
    const std::int64_t from = cuda::window::window_copy_source(i, sh, sw, dh, dw, c, oy, ox);
    dst[static_cast<std::size_t>(i)] = from >= 0 ? src[static_cast<std::size_t>(from)] : 0.0f;
  }
  return dst;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::fabs(want[i]))) << what << " element " << i;
}

TEST(CudaWindowMath, ExplicitPaddingAndCroppingEqualAnAsymmetricallyPaddedConvolution) {
  // What conv.cu does where cuDNN's symmetric padding cannot give the output size: pad x into
  // scratch, convolve without padding, crop the input gradient. Computed here with the CPU's
  // convolution on both sides.
  const Conv2dDesc cases[] = {
      conv(2, 8, 8, 3, 4, 3, 2, 1, 0, 0, 1, 1),     // Keras 'same', stride 2: one more row / column
      conv(2, 7, 9, 4, 6, 2, 1, 1, 0, 0, 1, 1),     // an even kernel, 'same'
      conv(1, 9, 8, 4, 4, 3, 1, 2, 2, 1, 2, 3, 2),  // dilated, grouped, uneven on both axes
  };
  for (const Conv2dDesc& d : cases) {
    SCOPED_TRACE("conv " + std::to_string(d.kh) + "x" + std::to_string(d.kw) + " pads " + std::to_string(d.pad_top) +
                 "," + std::to_string(d.pad_left) + "," + std::to_string(d.pad_bottom) + "," +
                 std::to_string(d.pad_right));
    const std::int64_t hp = d.h + d.pad_top + d.pad_bottom, wp = d.w + d.pad_left + d.pad_right;
    Conv2dDesc padded = d;
    padded.h = hp;
    padded.w = wp;
    padded.pad_top = padded.pad_left = padded.pad_bottom = padded.pad_right = 0;
    const std::int64_t kn = d.kh * d.kw * (d.c / d.groups) * d.oc;
    const std::vector<float> x = normal(d.n * d.h * d.w * d.c, 1), k = normal(kn, 2),
                             dy = normal(d.n * d.oh * d.ow * d.oc, 3);
    std::vector<float> y(static_cast<std::size_t>(d.n * d.oh * d.ow * d.oc)), y_pad(y.size());
    cpu().conv2d(ctx(), d, x.data(), k.data(), nullptr, y.data());
    const std::vector<float> xp = window_copy(x, d.n, d.h, d.w, hp, wp, d.c, -d.pad_top, -d.pad_left);
    cpu().conv2d(ctx(), padded, xp.data(), k.data(), nullptr, y_pad.data());
    expect_close(y_pad, y, "forward");

    std::vector<float> dx(x.size()), dxp(xp.size());
    cpu().conv2d_backward_data(ctx(), d, k.data(), dy.data(), dx.data());
    cpu().conv2d_backward_data(ctx(), padded, k.data(), dy.data(), dxp.data());
    expect_close(window_copy(dxp, d.n, hp, wp, d.h, d.w, d.c, d.pad_top, d.pad_left), dx, "input gradient");

    std::vector<float> dw(k.size()), dw_pad(k.size());
    cpu().conv2d_backward_weights(ctx(), d, x.data(), dy.data(), dw.data(), nullptr);
    cpu().conv2d_backward_weights(ctx(), padded, xp.data(), dy.data(), dw_pad.data(), nullptr);
    expect_close(dw_pad, dw, "kernel gradient");
  }
}

TEST(CudaWindowMath, KernelTransposeIsHwioToKrscAndBack) {
  const std::int64_t kh = 3, kw = 2, cg = 4, oc = 5, rows = kh * kw * cg;
  const std::vector<float> hwio = normal(rows * oc, 5);
  std::vector<float> krsc(hwio.size()), back(hwio.size());
  for (std::int64_t i = 0; i < rows * oc; ++i)
    krsc[static_cast<std::size_t>(i)] = hwio[static_cast<std::size_t>(cuda::window::transpose_source(i, rows, oc))];
  for (std::int64_t o = 0; o < oc; ++o)
    for (std::int64_t r = 0; r < kh; ++r)
      for (std::int64_t s = 0; s < kw; ++s)
        for (std::int64_t c = 0; c < cg; ++c)
          ASSERT_EQ(krsc[static_cast<std::size_t>(((o * kh + r) * kw + s) * cg + c)],
                    hwio[static_cast<std::size_t>(((r * kw + s) * cg + c) * oc + o)]);
  for (std::int64_t i = 0; i < rows * oc; ++i)
    back[static_cast<std::size_t>(i)] = krsc[static_cast<std::size_t>(cuda::window::transpose_source(i, oc, rows))];
  EXPECT_EQ(back, hwio);
}

}  // namespace
}  // namespace lockstep::backend
