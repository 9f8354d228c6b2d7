// affine_transform (keras.ops.image.affine_transform on the TensorFlow backend): against a reference
// written from ImageProjectiveTransformV3's rules (tensorflow/core/kernels/image/image_ops.h) for
// every fill mode and interpolation, and exact pixels for translations, a 90 degree rotation and a
// zoom; 16-bit images, one transform for all images, k = 0, the gradient and the refusals.
#include "lockstep/layers/affine_transform.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {

using layers::FillMode;
using layers::Interpolation;

constexpr FillMode kModes[] = {FillMode::kReflect, FillMode::kWrap, FillMode::kConstant, FillMode::kNearest};

// ---- the reference: image_ops.h's rules, coordinates in float32 as TensorFlow computes them, the
// blend in double ----

// MapCoordinate<mode>(c, len).
float map_coordinate(float c, std::int64_t len, FillMode mode) {
  const auto n = static_cast<float>(len);
  if (mode == FillMode::kConstant) return c;
  if ((mode == FillMode::kReflect || mode == FillMode::kWrap) && len <= 1) return 0.0f;
  if (mode == FillMode::kReflect) {
    const std::int64_t s = 2 * len;
    if (c < 0) {
      if (c < static_cast<float>(s))
        c = static_cast<float>(s * static_cast<std::int64_t>(-c / static_cast<float>(s))) + c;
      c = c < -n ? c + static_cast<float>(s) : -c - 1;
    } else if (c > n - 1) {
      c -= static_cast<float>(s * static_cast<std::int64_t>(c / static_cast<float>(s)));
      if (c >= n) c = static_cast<float>(s) - c - 1;
    }
  } else if (mode == FillMode::kWrap) {
    const std::int64_t sz = len - 1;
    if (c < 0)
      c += static_cast<float>(len * (static_cast<std::int64_t>(-c / static_cast<float>(sz)) + 1));
    else if (c > n - 1)
      c -= static_cast<float>(len * static_cast<std::int64_t>(c / static_cast<float>(sz)));
  }
  return std::clamp(c, 0.0f, n - 1);
}

struct Images {
  std::vector<float> v;
  std::int64_t n, h, w, c;
  double at(std::int64_t b, std::int64_t y, std::int64_t x, std::int64_t k, double fill) const {
    if (y < 0 || y >= h || x < 0 || x >= w) return fill;  // read_with_fill_value
    return v[static_cast<std::size_t>(((b * h + y) * w + x) * c + k)];
  }
};

std::vector<double> reference(const Images& im, const std::vector<float>& t, Interpolation interpolation,
                              FillMode mode, float fill) {
  std::vector<double> out;
  const bool one = t.size() == 8;
  for (std::int64_t b = 0; b < im.n; ++b) {
    const float* m = t.data() + (one ? 0 : 8 * b);
    for (std::int64_t i = 0; i < im.h; ++i)
      for (std::int64_t j = 0; j < im.w; ++j) {
        const auto x_out = static_cast<float>(j), y_out = static_cast<float>(i);
        const float k = m[6] * x_out + m[7] * y_out + 1.0f;
        if (k == 0.0f) {  // TensorFlow's generator gives fill_value before mapping a coordinate
          out.insert(out.end(), static_cast<std::size_t>(im.c), fill);
          continue;
        }
        const float x_in = (m[0] * x_out + m[1] * y_out + m[2]) / k;
        const float y_in = (m[3] * x_out + m[4] * y_out + m[5]) / k;
        const float x = map_coordinate(x_in, im.w, mode), y = map_coordinate(y_in, im.h, mode);
        for (std::int64_t ch = 0; ch < im.c; ++ch) {
          if (interpolation == Interpolation::kNearest) {
            out.push_back(im.at(b, static_cast<std::int64_t>(std::round(y)),
                                static_cast<std::int64_t>(std::round(x)), ch, fill));
          } else {
            const double yf = std::floor(y), xf = std::floor(x), yc = yf + 1, xc = xf + 1;
            const auto f = [&](double yy, double xx) {
              return im.at(b, static_cast<std::int64_t>(yy), static_cast<std::int64_t>(xx), ch, fill);
            };
            const double top = (xc - x) * f(yf, xf) + (x - xf) * f(yf, xc);
            const double bottom = (xc - x) * f(yc, xf) + (x - xf) * f(yc, xc);
            out.push_back((yc - y) * top + (y - yf) * bottom);
          }
        }
      }
  }
  return out;
}

Images random_images(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::uint64_t seed) {
  return {test::random_uniform(Shape{n, h, w, c}, seed, 0.0f, 1.0f).to_vector<float>(), n, h, w, c};
}

Tensor tensor_of(const Images& im) { return Tensor::from_vector(im.v, Shape{im.n, im.h, im.w, im.c}); }

Tensor transforms_of(const std::vector<float>& t) {
  return Tensor::from_vector(t, Shape{static_cast<std::int64_t>(t.size() / 8), 8});
}

// Rotations by any angle (several turns), scales from 0.3 to 3 and shifts past the image: every
// fill mode's folding is exercised, points far outside included.
std::vector<float> random_transforms(std::int64_t n, std::uint64_t seed) {
  const std::vector<float> u = test::random_uniform(Shape{n, 4}, seed, 0.0f, 1.0f).to_vector<float>();
  std::vector<float> t;
  for (std::int64_t b = 0; b < n; ++b) {
    const float* r = u.data() + 4 * b;
    const double a = (r[0] - 0.5) * 14.0, s = 0.3 + 2.7 * r[1];
    for (const double e : {s * std::cos(a), -s * std::sin(a), (r[2] - 0.5) * 30.0, s * std::sin(a),
                           s * std::cos(a), (r[3] - 0.5) * 30.0, 0.0, 0.0})
      t.push_back(static_cast<float>(e));
  }
  return t;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

std::string name(Interpolation i, FillMode m) {
  return std::string(layers::interpolation_name(i)) + "/" + layers::fill_mode_name(m);
}

TEST(AffineTransform, MatchesImageProjectiveTransformV3ForEveryFillModeAndInterpolation) {
  const Images im = random_images(6, 5, 7, 2, 11);
  for (std::uint64_t trial = 0; trial < 8; ++trial) {
    const std::vector<float> t = random_transforms(im.n, 100 + trial);
    for (const Interpolation i : {Interpolation::kNearest, Interpolation::kBilinear})
      for (const FillMode m : kModes) {
        const Tensor out = layers::affine_transform(tensor_of(im), transforms_of(t), i, m, 0.25f);
        ASSERT_EQ(out.shape(), (Shape{6, 5, 7, 2}));
        // Within float32's rounding of the coordinates (a compiler may fuse TensorFlow's multiply-adds)
        // and of the blend.
        expect_near(out.to_vector<float>(), reference(im, t, i, m, 0.25f), 4e-6, name(i, m));
      }
  }
}

// An axis of one pixel reads that pixel in reflect and wrap (image_ops.h: len <= 1).
TEST(AffineTransform, ImagesOfOneRowOrColumnAndOneTransformForAll) {
  const Images row = random_images(3, 1, 6, 1, 12);
  const std::vector<float> t = random_transforms(1, 13);
  for (const Interpolation i : {Interpolation::kNearest, Interpolation::kBilinear})
    for (const FillMode m : kModes)
      expect_near(layers::affine_transform(tensor_of(row), transforms_of(t), i, m, -1.0f).to_vector<float>(),
                  reference(row, t, i, m, -1.0f), 4e-6, name(i, m));
}

// Image 4x4 of values 10 * row + column, shifted by (dx, dy) = (1, -2): Keras' translation matrix
// [1, 0, -dx, 0, 1, -dy, 0, 0] reads input (x - 1, y + 2).
TEST(AffineTransform, IntegerTranslationsGiveEachFillModesExactPixels) {
  std::vector<float> v;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) v.push_back(static_cast<float>(10 * y + x));
  const Tensor image = Tensor::from_vector(v, Shape{1, 4, 4, 1});
  const Tensor shift = transforms_of({1, 0, -1, 0, 1, 2, 0, 0});
  const std::vector<float> constant{-1, 20, 21, 22, -1, 30, 31, 32, -1, -1, -1, -1, -1, -1, -1, -1};
  const std::vector<float> nearest{20, 20, 21, 22, 30, 30, 31, 32, 30, 30, 31, 32, 30, 30, 31, 32};
  // reflect: (d c b a | a b c d | d c b a): column -1 is column 0, row 4 is row 3, row 5 row 2.
  const std::vector<float> reflect{20, 20, 21, 22, 30, 30, 31, 32, 30, 30, 31, 32, 20, 20, 21, 22};
  // wrap: (a b c d | a b c d): column -1 is column 3, row 4 row 0, row 5 row 1.
  const std::vector<float> wrap{23, 20, 21, 22, 33, 30, 31, 32, 3, 0, 1, 2, 13, 10, 11, 12};
  for (const Interpolation i : {Interpolation::kNearest, Interpolation::kBilinear}) {
    EXPECT_EQ(layers::affine_transform(image, shift, i, FillMode::kConstant, -1.0f).to_vector<float>(),
              constant);
    EXPECT_EQ(layers::affine_transform(image, shift, i, FillMode::kNearest).to_vector<float>(), nearest);
    EXPECT_EQ(layers::affine_transform(image, shift, i, FillMode::kReflect).to_vector<float>(), reflect);
    EXPECT_EQ(layers::affine_transform(image, shift, i, FillMode::kWrap).to_vector<float>(), wrap);
  }
}

// Keras' rotation by 90 degrees about the centre of a 3x3 image (cos 0, sin 1; cx = cy = 1):
// [0, -1, 2, 1, 0, 0, 0, 0], output (x, y) reads input (2 - y, x): the image turned.
TEST(AffineTransform, ANinetyDegreeRotationTurnsTheImageExactly) {
  const Tensor image = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1});
  const Tensor turn = transforms_of({0, -1, 2, 1, 0, 0, 0, 0});
  for (const Interpolation i : {Interpolation::kNearest, Interpolation::kBilinear})
    for (const FillMode m : kModes)
      EXPECT_EQ(layers::affine_transform(image, turn, i, m).to_vector<float>(),
                (std::vector<float>{3, 6, 9, 2, 5, 8, 1, 4, 7}))
          << name(i, m);
}

// Keras' zoom matrix with zx = 0.5 on a row of 5 pixels: input x = 0.5 x + (5 - 1) / 2 (1 - 0.5),
// so outputs read 1, 1.5, 2, 2.5, 3: bilinear blends halves, nearest rounds halves away from zero.
TEST(AffineTransform, AZoomInterpolatesBetweenPixels) {
  const Tensor row = Tensor::from_vector<float>({0, 10, 20, 30, 40}, Shape{1, 1, 5, 1});
  const Tensor zoom = transforms_of({0.5f, 0, 1, 0, 1, 0, 0, 0});
  EXPECT_EQ(
      layers::affine_transform(row, zoom, Interpolation::kBilinear, FillMode::kReflect).to_vector<float>(),
      (std::vector<float>{10, 15, 20, 25, 30}));
  EXPECT_EQ(
      layers::affine_transform(row, zoom, Interpolation::kNearest, FillMode::kReflect).to_vector<float>(),
      (std::vector<float>{10, 20, 20, 30, 30}));
}

// k = c0 x + c1 y + 1 = 0 gives fill_value (TensorFlow's rule); elsewhere the projective division.
TEST(AffineTransform, AProjectiveTransformDividesAndKZeroIsFill) {
  const Images im = random_images(2, 4, 5, 3, 14);
  const std::vector<float> t{1, 0.2f, 0, 0.1f, 1, 0, 0.3f,  0.1f,
                             1, 0,    0, 0,    1, 0, -0.5f, 0};  // k = 0 at x = 2
  for (const Interpolation i : {Interpolation::kNearest, Interpolation::kBilinear})
    for (const FillMode m : kModes) {
      const std::vector<double> want = reference(im, t, i, m, 7.0f);
      EXPECT_EQ(want[static_cast<std::size_t>(((4 * 5) + 2) * 3)], 7.0);  // image 1, (0, 2)
      expect_near(layers::affine_transform(tensor_of(im), transforms_of(t), i, m, 7.0f).to_vector<float>(),
                  want, 1e-5, name(i, m));
    }
}

// 16-bit images are transformed in float32 and rounded once: the float32 result, rounded.
TEST(AffineTransform, SixteenBitImagesAreTheFloat32ResultRounded) {
  const Images im = random_images(3, 6, 6, 2, 15);
  const std::vector<float> t = random_transforms(3, 16);
  for (const DType dt : {DType::kF16, DType::kBF16}) {
    const Tensor x = tensor_of(im).to(dt);
    const Tensor once = layers::affine_transform(x.to(DType::kF32), transforms_of(t),
                                                 Interpolation::kBilinear, FillMode::kReflect)
                            .to(dt);
    const Tensor out =
        layers::affine_transform(x, transforms_of(t), Interpolation::kBilinear, FillMode::kReflect);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_TRUE(out.bitwise_equal(once)) << dtype_name(dt);
  }
}

// The images' gradient: each input pixel gets the sum of the weights its reads carry. A shift by
// half a pixel in constant mode: every output reads two neighbours at 1/2 each.
TEST(AffineTransform, ImagesGetTheGradientOfTheirWeights) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{1, 1, 4, 1});
  GradientTape tape;
  tape.watch(x);
  const Tensor y = layers::affine_transform(x, transforms_of({1, 0, 0.5f, 0, 1, 0, 0, 0}),
                                            Interpolation::kBilinear, FillMode::kConstant);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5f, 2.5f, 3.5f, 2.0f}));
  const Tensor g = tape.gradient(sum(y), std::vector<Tensor>{x})[0];
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{0.5f, 1.0f, 1.0f, 1.0f}));
}

TEST(AffineTransform, RefusesWhatKerasRefuses) {
  const Tensor x = Tensor::zeros(Shape{2, 3, 3, 1});
  const Tensor t = transforms_of({1, 0, 0, 0, 1, 0, 0, 0});
  EXPECT_VALUE_ERROR(layers::affine_transform(x, t, Interpolation::kBicubic, FillMode::kReflect),
                     "interpolation 'bicubic' is not supported");
  EXPECT_VALUE_ERROR(
      layers::affine_transform(x, Tensor::zeros(Shape{2, 6}), Interpolation::kBilinear, FillMode::kReflect),
      "transforms must be (2, 8) or (1, 8)");
  EXPECT_VALUE_ERROR(layers::affine_transform(Tensor::zeros(Shape{3, 3, 1}), t, Interpolation::kBilinear,
                                              FillMode::kReflect),
                     "needs images (batch, height, width, channels)");
  EXPECT_VALUE_ERROR(
      layers::parse_fill_mode("mirror", "RandomZoom"),
      "RandomZoom: Unknown `fill_mode` mirror. Expected of one ('reflect', 'wrap', 'constant', 'nearest')");
  EXPECT_EQ(layers::affine_transform(Tensor::zeros(Shape{0, 3, 3, 1}), t, Interpolation::kBilinear,
                                     FillMode::kReflect)
                .shape(),
            (Shape{0, 3, 3, 1}));
}

}  // namespace
}  // namespace lockstep
