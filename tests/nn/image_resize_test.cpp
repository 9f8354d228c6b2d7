// resize_images (Resizing's and UpSampling2D's one resize) against references written here in
// double from the kernels tf.image.resize documents and runs: Keys' cubic (a = -0.5, TensorFlow's
// 1024-step table), Lanczos of radius 3 and 5, area averaging, bilinear and nearest with
// half-pixel centres, and with antialias scale_and_translate's kernels widened when shrinking;
// down and up, non-square; names refused with the list.
#include "lockstep/layers/image_resize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>
#include <numbers>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {

using layers::Interpolation;
using test::message_of;
using Matrix = std::vector<std::vector<double>>;  // out x in

// Each output's weights over the inputs, from a kernel k(distance) over the inputs first..last
// (those outside the image dropped), renormalized to sum to 1 as TensorFlow does.
std::vector<double> normalized(std::int64_t in, std::int64_t first, std::int64_t last,
                               const std::function<double(std::int64_t)>& k) {
  std::vector<double> row(static_cast<std::size_t>(in), 0.0);
  double total = 0;
  for (std::int64_t j = first; j <= last; ++j)
    if (j >= 0 && j < in) {
      row[static_cast<std::size_t>(j)] = k(j);
      total += k(j);
    }
  for (double& w : row) w /= total;
  return row;
}

double keys_cubic(double x) {  // a = -0.5
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

double lanczos(double r, double x) {
  x = std::abs(x);
  if (x >= r) return 0;
  if (x < 1e-9) return 1;
  const double pi = std::numbers::pi;
  return r * std::sin(pi * x) * std::sin(pi * x / r) / (pi * pi * x * x);
}

double triangle(double x) { return std::max(0.0, 1.0 - std::abs(x)); }

// tf.image.resize(antialias=True) for bilinear, bicubic, lanczos3 and lanczos5: the kernel K of
// radius r (triangle, Keys' cubic without the table, Lanczos) widened by k = max(in / out, 1) over
// the inputs ceil(c - r k - 0.5) .. floor(c + r k - 0.5), K((j + 0.5 - c) / k), renormalized.
Matrix antialiased(std::int64_t in, std::int64_t out, Interpolation method) {
  const double r = method == Interpolation::kBilinear  ? 1
                   : method == Interpolation::kBicubic ? 2
                   : method == Interpolation::kLanczos3 ? 3
                                                        : 5;
  const auto kernel = [&](double x) {
    return method == Interpolation::kBilinear  ? triangle(x)
           : method == Interpolation::kBicubic ? keys_cubic(x)
                                               : lanczos(r, x);
  };
  const double scale = static_cast<double>(in) / static_cast<double>(out), k = std::max(scale, 1.0);
  Matrix m;
  for (std::int64_t i = 0; i < out; ++i) {
    const double c = (static_cast<double>(i) + 0.5) * scale;
    m.push_back(normalized(in, static_cast<std::int64_t>(std::ceil(c - r * k - 0.5)),
                           static_cast<std::int64_t>(std::floor(c + r * k - 0.5)),
                           [&](std::int64_t j) { return kernel((static_cast<double>(j) + 0.5 - c) / k); }));
  }
  return m;
}

Matrix reference(std::int64_t in, std::int64_t out, Interpolation method, bool antialias = false) {
  if (antialias && method != Interpolation::kNearest && method != Interpolation::kArea)
    return antialiased(in, out, method);
  Matrix m;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (std::int64_t i = 0; i < out; ++i) {
    std::vector<double> row(static_cast<std::size_t>(in), 0.0);
    const double s = (static_cast<double>(i) + 0.5) * scale - 0.5;  // half-pixel sample
    const auto at = static_cast<std::int64_t>(std::floor(s));
    switch (method) {
      case Interpolation::kNearest:
        row[static_cast<std::size_t>(std::min<std::int64_t>(
            static_cast<std::int64_t>(std::floor((static_cast<double>(i) + 0.5) * scale)), in - 1))] = 1;
        break;
      case Interpolation::kBilinear: {
        const double t = s - static_cast<double>(at);
        row[static_cast<std::size_t>(std::clamp<std::int64_t>(at, 0, in - 1))] += 1 - t;
        row[static_cast<std::size_t>(std::clamp<std::int64_t>(at + 1, 0, in - 1))] += t;
        break;
      }
      case Interpolation::kBicubic: {
        // TensorFlow reads the kernel from a table of 1024 steps: t rounded to a multiple of 1/1024.
        const double t = std::round((s - static_cast<double>(at)) * 1024.0) / 1024.0;
        row = normalized(in, at - 1, at + 2,
                         [&](std::int64_t j) { return keys_cubic(static_cast<double>(j - at) - t); });
        break;
      }
      case Interpolation::kLanczos3:
      case Interpolation::kLanczos5: {
        const double r = method == Interpolation::kLanczos3 ? 3 : 5;
        const double c = (static_cast<double>(i) + 0.5) * scale;  // the sample, in pixel-edge units
        row = normalized(in, static_cast<std::int64_t>(std::ceil(c - r - 0.5)),
                         static_cast<std::int64_t>(std::floor(c + r - 0.5)),
                         [&](std::int64_t j) { return lanczos(r, static_cast<double>(j) + 0.5 - c); });
        break;
      }
      case Interpolation::kArea: {
        const double lo = static_cast<double>(i) * scale, hi = lo + scale;
        for (std::int64_t j = 0; j < in; ++j) {
          const double covered =
              std::min(hi, static_cast<double>(j + 1)) - std::max(lo, static_cast<double>(j));
          if (covered > 0) row[static_cast<std::size_t>(j)] = covered / scale;
        }
        break;
      }
    }
    m.push_back(row);
  }
  return m;
}

// x (n, h, w, c), values that no separable pattern hides.
std::vector<float> image_values(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c) {
  std::vector<float> v(static_cast<std::size_t>(n * h * w * c));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i * i % 97)));
  return v;
}

// resize_images(x) against A_h x A_w^T per example and channel, in double.
void expect_as_reference(std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow,
                         Interpolation method, bool antialias = false, std::int64_t c = 3) {
  SCOPED_TRACE(testing::Message() << layers::interpolation_name(method) << (antialias ? " antialiased" : "")
                                  << " (" << h << ", " << w << ", " << c << ") -> (" << oh << ", " << ow << ")");
  const std::int64_t n = 2;
  const std::vector<float> v = image_values(n, h, w, c);
  const Tensor y = layers::resize_images(Tensor::from_vector(v, Shape{n, h, w, c}), oh, ow, method, antialias);
  ASSERT_EQ(y.shape(), (Shape{n, oh, ow, c}));
  const auto got = y.to_vector<float>();
  const Matrix ah = reference(h, oh, method, antialias), aw = reference(w, ow, method, antialias);
  // TensorFlow places its samples in float: on a long axis they stray from the double reference's
  // by about in * 2^-24 pixels, between pixels that differ by up to 2 here.
  const double tolerance = 2e-5 * std::max(1.0, static_cast<double>(std::max(h, w)) / 64.0);
  const auto at = [&](std::int64_t b, std::int64_t i, std::int64_t j, std::int64_t ch) {
    return static_cast<double>(v[static_cast<std::size_t>(((b * h + i) * w + j) * c + ch)]);
  };
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          double want = 0;
          for (std::int64_t p = 0; p < h; ++p)
            for (std::int64_t q = 0; q < w; ++q)
              want += ah[static_cast<std::size_t>(i)][static_cast<std::size_t>(p)] *
                      aw[static_cast<std::size_t>(j)][static_cast<std::size_t>(q)] * at(b, p, q, ch);
          EXPECT_NEAR(got[static_cast<std::size_t>(((b * oh + i) * ow + j) * c + ch)], want, tolerance)
              << "at " << b << ", " << i << ", " << j << ", " << ch;
        }
}

TEST(ResizeImages, EveryInterpolationAsTensorFlowsKernelsDownUpAndNonSquare) {
  for (const Interpolation m : {Interpolation::kNearest, Interpolation::kBilinear, Interpolation::kBicubic,
                                Interpolation::kLanczos3, Interpolation::kLanczos5, Interpolation::kArea}) {
    expect_as_reference(5, 7, 3, 11, m);  // rows down, columns up
    expect_as_reference(4, 9, 10, 4, m);  // rows up, columns down
    expect_as_reference(12, 3, 5, 3, m);  // a factor that is not whole; columns kept
    expect_as_reference(2, 3, 6, 12, m);  // UpSampling2D's whole factors
    expect_as_reference(300, 2, 7, 3, m);  // rows past the matrix product's 256 inputs: by taps
  }
}

TEST(ResizeImages, ManyChannelsGrownAsTensorFlowsKernelsInOnePassOrTwo) {
  // A U-Net decoder's UpSampling2D: bilinear growth of 32 channels and more resizes both axes in
  // one pass over the product of their taps; the other methods one axis after the other.
  for (const Interpolation m : {Interpolation::kBilinear, Interpolation::kBicubic, Interpolation::kArea})
    for (const std::int64_t c : {32, 35}) {
      expect_as_reference(3, 4, 6, 8, m, false, c);  // UpSampling2D((2, 2))
      expect_as_reference(2, 5, 7, 6, m, true, c);   // factors that are not whole
    }
}

TEST(ResizeImages, AntialiasWidensTheKernelWhenShrinkingAsScaleAndTranslate) {
  for (const Interpolation m : {Interpolation::kNearest, Interpolation::kBilinear, Interpolation::kBicubic,
                                Interpolation::kLanczos3, Interpolation::kLanczos5, Interpolation::kArea}) {
    expect_as_reference(13, 7, 3, 11, m, true);  // rows down by 13/3, columns up
    expect_as_reference(4, 20, 10, 6, m, true);  // rows up, columns down by a factor that is not whole
    expect_as_reference(2, 270, 3, 30, m, true);  // columns past the product's 256 inputs: by taps
  }
  // Shrinking 24 -> 3 with antialias: the triangle spans 8 inputs each way, so each output mixes
  // 2 * 8 inputs at most (16, the edges fewer); without, bilinear mixes 2.
  EXPECT_EQ(layers::resize_weights(24, 3, Interpolation::kBilinear, true).taps, 16);
  EXPECT_EQ(layers::resize_weights(24, 3, Interpolation::kBilinear).taps, 2);
  // Growing, antialias changes nothing for Lanczos (k = 1); nearest and area ignore it.
  for (const auto& [m, in, out] : {std::tuple{Interpolation::kLanczos3, 5, 9}, {Interpolation::kNearest, 9, 4},
                                   {Interpolation::kArea, 9, 4}}) {
    const auto plain = layers::resize_weights(in, out, m), anti = layers::resize_weights(in, out, m, true);
    EXPECT_EQ(plain.index, anti.index) << layers::interpolation_name(m);
    EXPECT_EQ(plain.weight, anti.weight) << layers::interpolation_name(m);
  }
}

TEST(ResizeImages, SameSizeReturnsTheImagesAsTheyAre) {
  // tf.image.resize skips a resize to the images' own size, whatever the method: Lanczos' weights
  // at whole distances are not exactly 0 in float, so computing it would change the bits.
  const Tensor x = Tensor::from_vector(image_values(2, 4, 5, 3), Shape{2, 4, 5, 3});
  for (const Interpolation m : {Interpolation::kBicubic, Interpolation::kLanczos3, Interpolation::kLanczos5})
    EXPECT_EQ(layers::resize_images(x, 4, 5, m, true).to_vector<float>(), x.to_vector<float>())
        << layers::interpolation_name(m);
}

TEST(ResizeImages, TapsOfEachMethodAreTheKernelsSupport) {
  // Bicubic reads 4 inputs, Lanczos 2r + 1 at most (not widened when shrinking: no antialias),
  // area as many as one output covers; every output's weights sum to 1.
  EXPECT_EQ(layers::resize_weights(20, 40, Interpolation::kBicubic).taps, 4);
  EXPECT_LE(layers::resize_weights(20, 7, Interpolation::kLanczos3).taps, 7);
  EXPECT_LE(layers::resize_weights(20, 7, Interpolation::kLanczos5).taps, 11);
  EXPECT_EQ(layers::resize_weights(12, 3, Interpolation::kArea).taps, 4);
  for (const Interpolation m : {Interpolation::kBilinear, Interpolation::kBicubic, Interpolation::kLanczos3,
                                Interpolation::kLanczos5, Interpolation::kArea}) {
    const auto a = layers::resize_weights(9, 4, m);
    for (std::size_t i = 0; i < 4; ++i) {
      double s = 0;
      for (std::int64_t k = 0; k < a.taps; ++k) s += a.weight[i * static_cast<std::size_t>(a.taps) + k];
      EXPECT_NEAR(s, 1.0, 1e-6) << layers::interpolation_name(m) << " output " << i;
    }
  }
}

TEST(ResizeImages, BothLayersResizeAlikeAndRefuseOtherNamesListingKeras) {
  // UpSampling2D's interpolations other than nearest are resize to size times the image (Keras'
  // ops.image.resize), Resizing's the same resize.
  const std::vector<float> v = image_values(1, 3, 2, 2);
  const Tensor x = Tensor::from_vector(v, Shape{1, 3, 2, 2});
  for (const char* m : {"nearest", "bilinear", "bicubic", "lanczos3", "lanczos5", "area"}) {
    const auto up = layers::UpSampling2D({2, 3}, m)->call(x, {}).to_vector<float>();
    const auto rs = layers::Resizing(6, 6, m)->call(x, {}).to_vector<float>();
    EXPECT_EQ(up, rs) << m;
  }
  // Keras lower-cases UpSampling2D's name, and so does lockstep; Resizing's is taken as written.
  EXPECT_EQ(dynamic_cast<const layers::UpSampling2DLayer&>(*layers::UpSampling2D({2, 2}, "BiCubic"))
                .interpolation(),
            "bicubic");
  for (const std::string bad : {"gaussian", "mitchellcubic", "cubic"}) {
    EXPECT_VALUE_ERROR(layers::Resizing(3, 3, bad), "\"lanczos5\" and \"area\"");
    const std::string msg = message_of([&] { (void)layers::UpSampling2D({2, 2}, bad); });
    EXPECT_NE(msg.find("UpSampling2D: interpolation '" + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"nearest\", \"bilinear\", \"bicubic\", \"lanczos3\""), std::string::npos) << msg;
  }
  EXPECT_VALUE_ERROR(layers::Resizing(3, 3, "Bilinear"), "interpolation 'Bilinear'");
}

// A batch of large images keeps small constants: each axis' tables (its taps and their transpose)
// are the axis' alone, whatever the batch (an index per example and row would be, for lanczos5's
// 11 taps here, 8 * 224 * 160 * 11 int64, 25 MB, and for a larger batch past device_constant's
// budget).
TEST(ResizeImages, LargeImagesKeepSmallConstants) {
  const Device here = context_device(current_compute_context());
  const std::uint64_t before = device_constant_bytes(here);
  const Tensor x = Tensor::zeros(Shape{8, 224, 224, 1}, DType::kF32);
  EXPECT_EQ(layers::resize_images(x, 160, 160, Interpolation::kLanczos5).shape(), (Shape{8, 160, 160, 1}));
  EXPECT_LT(device_constant_bytes(here) - before, std::uint64_t{1} << 20);
}

TEST(ResizeImages, AnEmptyBatchKeepsItsShape) {
  const Tensor x = Tensor::from_vector(std::vector<float>{}, Shape{0, 3, 4, 2});
  EXPECT_EQ(layers::resize_images(x, 5, 2, Interpolation::kLanczos3).shape(), (Shape{0, 5, 2, 2}));
}

}  // namespace
}  // namespace lockstep
