// Parity rows for casts with known bit patterns, on every available backend: float16 and
// bfloat16 rounding (ties to even, subnormals, overflow, NaN), their exact widening (all 2^16
// patterns against a decoding written here), float -> int truncation and saturation, and
// uint8 round trips.
#include <bit>
#include <cmath>
#include <limits>

#include "backend/parity.hpp"

namespace lockstep::parity {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename F>
void for_each_backend(F&& f) {
  for (const Backend& b : backends()) {
    if (!b.available) continue;
    SCOPED_TRACE(b.name);
    ComputeScope scope(context_of(b.kind));
    f();
  }
}

template <typename Half>
std::vector<std::uint16_t> bits_of(const std::vector<float>& values) {
  const Tensor t = cast(Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}), dtype_of_v<Half>);
  std::vector<std::uint16_t> out;
  for (Half h : t.template to_vector<Half>()) out.push_back(h.bits);
  return out;
}

struct BitCase {
  float value;
  std::uint16_t bits;
  const char* what;
};

template <typename Half>
void expect_bits(const std::vector<BitCase>& cases) {
  std::vector<float> values;
  for (const BitCase& c : cases) values.push_back(c.value);
  const std::vector<std::uint16_t> got = bits_of<Half>(values);
  for (std::size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(got[i], cases[i].bits) << cases[i].what << " (" << cases[i].value << ")";
}

// binary16 decoded from its fields: the independent reference for widening.
double decode_f16(std::uint16_t b) {
  const int sign = b >> 15, exp = (b >> 10) & 0x1f, mant = b & 0x3ff;
  double v;
  if (exp == 0x1f) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(mant, -24);
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}
double decode_bf16(std::uint16_t b) {
  const int sign = b >> 15, exp = (b >> 7) & 0xff, mant = b & 0x7f;
  double v;
  if (exp == 0xff) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(mant, -133);
  else v = std::ldexp(128 + mant, exp - 134);
  return sign ? -v : v;
}

template <typename Half>
void check_every_pattern(double (*decode)(std::uint16_t)) {
  std::vector<Half> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<std::uint16_t>(i);
  const Tensor h = Tensor::from_vector(all, {65536});
  const std::vector<float> wide = cast(h, DType::kF32).to_vector<float>();  // 65536 elements: the parallel path
  const std::vector<Half> back = cast(cast(h, DType::kF32), dtype_of_v<Half>).template to_vector<Half>();
  int bad = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const double want = decode(static_cast<std::uint16_t>(i));
    const bool nan = std::isnan(want);
    const bool widened = nan ? std::isnan(wide[i])
                             : static_cast<double>(wide[i]) == want && std::signbit(wide[i]) == std::signbit(want);
    // Narrowing the widened value gives the same bits back (a NaN stays a NaN).
    const bool narrowed = nan ? (back[i].bits & 0x7fff) > (decode == decode_f16 ? 0x7c00 : 0x7f80)
                              : back[i].bits == all[i].bits;
    if ((!widened || !narrowed) && ++bad <= 5)
      ADD_FAILURE() << "pattern 0x" << std::hex << i << ": widened to " << wide[i] << " (want " << want
                    << "), narrowed back to 0x" << back[i].bits;
  }
  EXPECT_EQ(bad, 0);
}
}  // namespace

TEST(CastBits, Float32ToFloat16RoundsToNearestEven) {
  for_each_backend([] {
    expect_bits<Float16>({
        {1.0f / 3.0f, 0x3555, "1/3"},
        {65504.0f, 0x7bff, "largest finite"},
        {65519.0f, 0x7bff, "below the midpoint to 2^16"},
        {65520.0f, 0x7c00, "the midpoint rounds to even: inf"},
        {-65520.0f, 0xfc00, "-inf"},
        {1e10f, 0x7c00, "overflow"},
        {std::ldexp(1.0f, -24), 0x0001, "smallest subnormal 2^-24"},
        {std::ldexp(1.0f, -25), 0x0000, "2^-25 ties to even: 0"},
        {-std::ldexp(1.0f, -25), 0x8000, "-2^-25 ties to -0"},
        {std::ldexp(3.0f, -25), 0x0002, "1.5 * 2^-24 ties to even: 2 * 2^-24"},
        {std::ldexp(1.0f, -25) + std::ldexp(1.0f, -35), 0x0001, "just above the tie"},
        {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 0x0400, "midpoint to the smallest normal: even"},
        {std::ldexp(1.0f, -14), 0x0400, "smallest normal"},
        {1e-8f, 0x0000, "underflow"},
        {1.0f + std::ldexp(1.0f, -11), 0x3c00, "1 + half an ulp: even"},
        {1.0f + std::ldexp(3.0f, -11), 0x3c02, "1 + 1.5 ulp: even"},
        {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01, "above the tie"},
        {0.0f, 0x0000, "+0"},
        {-0.0f, 0x8000, "-0"},
        {kInf, 0x7c00, "inf"},
        {-kInf, 0xfc00, "-inf"},
        {-2.5f, 0xc100, "-2.5"},
    });
    for (std::uint16_t b : bits_of<Float16>({kNaN, -kNaN, std::bit_cast<float>(0x7f800001u)}))
      EXPECT_TRUE((b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0) << "NaN became 0x" << std::hex << b;
  });
}

TEST(CastBits, Float32ToBFloat16RoundsToNearestEven) {
  for_each_backend([] {
    expect_bits<BFloat16>({
        {1.0f / 3.0f, 0x3eab, "1/3"},
        {1.00390625f, 0x3f80, "1 + 2^-8 ties to even: 1"},
        {1.01171875f, 0x3f82, "1 + 3 * 2^-8 ties to even: 1 + 2^-6"},
        {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), 0x3f81, "above the tie"},
        {3.0e38f, 0x7f62, "large"},
        {std::bit_cast<float>(0x7f7e8000u), 0x7f7e, "tie below the largest: even"},
        {std::bit_cast<float>(0x7f7f8000u), 0x7f80, "tie above the largest: inf"},
        {std::numeric_limits<float>::max(), 0x7f80, "FLT_MAX rounds to inf"},
        {1e-40f, 0x0001, "float32 subnormal"},
        {-0.0f, 0x8000, "-0"},
        {kInf, 0x7f80, "inf"},
        {-kInf, 0xff80, "-inf"},
        {-2.5f, 0xc020, "-2.5"},
    });
    // A NaN whose payload lies in the low 16 bits must not truncate to inf.
    for (std::uint16_t b : bits_of<BFloat16>({kNaN, -kNaN, std::bit_cast<float>(0x7f800001u)}))
      EXPECT_TRUE((b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0) << "NaN became 0x" << std::hex << b;
  });
}

TEST(CastBits, EverySixteenBitPatternWidensExactlyAndNarrowsBack) {
  for_each_backend([] {
    check_every_pattern<Float16>(decode_f16);
    check_every_pattern<BFloat16>(decode_bf16);
  });
}

TEST(CastBits, FloatToIntTruncatesTowardZeroAndSaturates) {
  for_each_backend([] {
    const std::vector<float> v{-2.7f, 2.7f, -0.5f, 0.5f, 3e9f, -3e9f, kNaN, kInf, -kInf, 255.9f, 256.0f, -1.0f, 1e19f};
    const Tensor t = Tensor::from_vector(v, {13});
    EXPECT_EQ(cast(t, DType::kI32).to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{-2, 2, 0, 0, 2147483647, -2147483647 - 1, 0, 2147483647, -2147483647 - 1,
                                         255, 256, -1, 2147483647}));
    EXPECT_EQ(cast(t, DType::kU8).to_vector<std::uint8_t>(),
              (std::vector<std::uint8_t>{0, 2, 0, 0, 255, 0, 0, 255, 0, 255, 255, 0, 255}));
    const auto i64 = cast(t, DType::kI64).to_vector<std::int64_t>();
    EXPECT_EQ(i64[4], 3000000000LL);
    EXPECT_EQ(i64[12], std::numeric_limits<std::int64_t>::max());
    EXPECT_EQ(i64[8], std::numeric_limits<std::int64_t>::min());
    // Through the 16-bit floats too: float16's inf saturates, bfloat16's -2.5 truncates.
    EXPECT_EQ(cast(cast(t, DType::kF16), DType::kI32).to_vector<std::int32_t>()[4], 2147483647);
    EXPECT_EQ(cast(cast(t, DType::kBF16), DType::kI64).to_vector<std::int64_t>()[0], -2);
  });
}

TEST(CastBits, IntegersToFloatRoundToNearestEven) {
  for_each_backend([] {
    const Tensor i = Tensor::from_vector<std::int64_t>({16777217, 16777219, (std::int64_t{1} << 53) + 1, 2049, 65521},
                                                       {5});
    const auto f = cast(i, DType::kF32).to_vector<float>();
    EXPECT_EQ(f[0], 16777216.0f);  // tie to even
    EXPECT_EQ(f[1], 16777220.0f);  // tie to even (up)
    EXPECT_EQ(f[2], 9007199254740992.0f);
    const auto h = cast(i, DType::kF16).to_vector<Float16>();
    EXPECT_EQ(h[3].bits, 0x6800);  // 2049 ties to 2048
    EXPECT_EQ(h[4].bits, 0x7c00);  // past 65520: inf
  });
}

TEST(CastBits, Uint8RoundTripsThroughEveryDtype) {
  for_each_backend([] {
    std::vector<std::uint8_t> all(256);
    for (int i = 0; i < 256; ++i) all[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
    const Tensor u = Tensor::from_vector(all, {256});
    for (DType d : kAllDTypes) {
      EXPECT_EQ(cast(cast(u, d), DType::kU8).to_vector<std::uint8_t>(), all) << dtype_name(d);
      const std::vector<float> f = cast(cast(u, d), DType::kF32).to_vector<float>();
      for (int i = 0; i < 256; ++i) EXPECT_EQ(f[static_cast<std::size_t>(i)], static_cast<float>(i)) << dtype_name(d);
    }
  });
}

}  // namespace lockstep::parity
