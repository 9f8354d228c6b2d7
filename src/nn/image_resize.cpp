#include "lockstep/layers/image_resize.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <compare>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/op_record.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_resample.hpp"

namespace lockstep::layers {

namespace {
constexpr std::array<std::pair<Interpolation, const char*>, 6> kNames{{{Interpolation::kNearest, "nearest"},
                                                                       {Interpolation::kBilinear, "bilinear"},
                                                                       {Interpolation::kBicubic, "bicubic"},
                                                                       {Interpolation::kLanczos3, "lanczos3"},
                                                                       {Interpolation::kLanczos5, "lanczos5"},
                                                                       {Interpolation::kArea, "area"}}};

// One output's inputs and weights, an input at most once (weights of a clamped input add up, in
// double); zero weights are left out.
using Taps = std::vector<std::pair<std::int64_t, double>>;
void add_tap(Taps& taps, std::int64_t index, double weight) {
  if (weight == 0.0) return;
  for (auto& [i, w] : taps)
    if (i == index) {
      w += weight;
      return;
    }
  taps.emplace_back(index, weight);
}

std::int64_t bound(std::int64_t v, std::int64_t limit) { return std::clamp<std::int64_t>(v, 0, limit - 1); }

// resize_bicubic_op.cc's table: Keys' cubic (a = -0.5) at t = i / 1024, in float; entry 2i is the
// weight of the input at distance t, entry 2i + 1 the one at distance 1 + t.
const std::vector<float>& keys_cubic_table() {
  static const std::vector<float> table = [] {
    constexpr int kSize = 1024;
    constexpr float a = -0.5f;
    std::vector<float> t(2 * (kSize + 1));
    for (int i = 0; i <= kSize; ++i) {
      float x = static_cast<float>(i * 1.0 / kSize);
      t[static_cast<std::size_t>(2 * i)] = ((a + 2) * x - (a + 3)) * x * x + 1;
      x += 1.0f;
      t[static_cast<std::size_t>(2 * i + 1)] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    }
    return t;
  }();
  return table;
}

// sampling_kernels.h's LanczosKernelFunc, in float.
float lanczos(float radius, float x) {
  constexpr float kPi = 3.14159265359f;
  x = std::abs(x);
  if (x > radius) return 0.0f;
  if (x <= 1e-3f) return 1.0f;
  return radius * std::sin(kPi * x) * std::sin(kPi * x / radius) / (kPi * kPi * x * x);
}

float lanczos3(float x) { return lanczos(3.0f, x); }
float lanczos5(float x) { return lanczos(5.0f, x); }
// sampling_kernels.h's TriangleKernelFunc and KeysCubicKernelFunc (a = -0.5), in float.
float triangle(float x) {
  x = std::abs(x);
  return x < 1.0f ? 1.0f - x : 0.0f;
}
float keys_cubic(float x) {
  x = std::abs(x);
  if (x >= 2.0f) return 0.0f;
  if (x >= 1.0f) return ((-0.5f * x + 2.5f) * x - 4.0f) * x + 2.0f;
  return ((1.5f * x - 2.5f) * x) * x + 1.0f;
}

struct SamplingKernel {
  float radius;
  float (*at)(float);
};

// scale_and_translate_op.cc's ComputeSpansCore for output i (translation 0), in its float
// arithmetic: the kernel, widened by in / out when antialiasing a shrink, centred on the sample
// point, over the inputs it reaches inside the image, renormalized to sum to 1.
Taps scale_and_translate_taps(std::int64_t in, std::int64_t out, SamplingKernel kernel, bool antialias,
                              std::int64_t i) {
  const float scale = static_cast<float>(out) / static_cast<float>(in);
  const auto inv_scale = static_cast<float>(1.0 / scale);
  const float kernel_scale = antialias ? std::max(inv_scale, 1.0f) : 1.0f;
  const float one_over_kernel_scale = 1.0f / kernel_scale;
  const float reach = kernel.radius * kernel_scale;
  const float c = (static_cast<float>(i) + 0.5f) * inv_scale;
  const std::int64_t first = bound(static_cast<std::int64_t>(std::ceil(c - reach - 0.5f)), in);
  const std::int64_t last = bound(static_cast<std::int64_t>(std::floor(c + reach - 0.5f)), in);
  std::vector<float> w;
  float sum = 0.0f;
  for (std::int64_t j = first; j <= last; ++j) {
    w.push_back(kernel.at(std::abs((static_cast<float>(j) + 0.5f - c) * one_over_kernel_scale)));
    sum += w.back();
  }
  if (std::abs(sum) >= 1000.0f * std::numeric_limits<float>::min())
    for (float& v : w) v *= 1.0f / sum;
  Taps taps;
  for (std::int64_t j = first; j <= last; ++j) add_tap(taps, j, w[static_cast<std::size_t>(j - first)]);
  return taps;
}

// Which resize: the method and whether it antialiases (only where TensorFlow's does), one number
// for the keys of kept weights and constants.
struct Resize {
  Interpolation method;
  bool antialias;
  Resize(Interpolation m, bool a)
      : method(m), antialias(a && m != Interpolation::kNearest && m != Interpolation::kArea) {}
  std::int64_t code() const { return static_cast<std::int64_t>(method) * 2 + (antialias ? 1 : 0); }
  auto operator<=>(const Resize&) const = default;
};

// The weights TensorFlow's kernels give output i, in their float arithmetic.
Taps output_taps(std::int64_t in, std::int64_t out, Resize resize, std::int64_t i) {
  const Interpolation method = resize.method;
  if (resize.antialias) {
    switch (method) {
      case Interpolation::kBilinear:
        return scale_and_translate_taps(in, out, {1.0f, triangle}, true, i);
      case Interpolation::kBicubic:
        return scale_and_translate_taps(in, out, {2.0f, keys_cubic}, true, i);
      case Interpolation::kLanczos3:
        return scale_and_translate_taps(in, out, {3.0f, lanczos3}, true, i);
      default:
        return scale_and_translate_taps(in, out, {5.0f, lanczos5}, true, i);
    }
  }
  Taps taps;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const auto fi = static_cast<float>(i);
  switch (method) {
    case Interpolation::kNearest:
      add_tap(taps, bound(static_cast<std::int64_t>(std::floor((fi + 0.5f) * scale)), in), 1.0);
      break;
    case Interpolation::kBilinear: {
      const float s = (fi + 0.5f) * scale - 0.5f;
      const float f = std::floor(s);
      const float t = s - f;
      add_tap(taps, bound(static_cast<std::int64_t>(f), in), 1.0 - static_cast<double>(t));
      add_tap(taps, bound(static_cast<std::int64_t>(std::ceil(s)), in), t);
      break;
    }
    case Interpolation::kBicubic: {
      const float s = (fi + 0.5f) * scale - 0.5f;
      const auto at = static_cast<std::int64_t>(std::floor(s));
      const float delta = s - static_cast<float>(at);
      const long offset = std::lrintf(delta * 1024.0f);
      const std::vector<float>& c = keys_cubic_table();
      const auto entry = [&](long e) { return c[static_cast<std::size_t>(e)]; };
      const std::array<float, 4> kernel{entry(offset * 2 + 1), entry(offset * 2), entry((1024 - offset) * 2),
                                        entry((1024 - offset) * 2 + 1)};
      std::array<float, 4> w{};
      float sum = 0.0f;
      for (int k = 0; k < 4; ++k) {
        const std::int64_t j = at - 1 + k;
        w[static_cast<std::size_t>(k)] = j >= 0 && j < in ? kernel[static_cast<std::size_t>(k)] : 0.0f;
        sum += w[static_cast<std::size_t>(k)];
      }
      if (std::abs(sum) >= 1000.0f * std::numeric_limits<float>::min())
        for (float& v : w) v *= 1.0f / sum;
      for (int k = 0; k < 4; ++k) add_tap(taps, bound(at - 1 + k, in), w[static_cast<std::size_t>(k)]);
      break;
    }
    case Interpolation::kLanczos3:
      return scale_and_translate_taps(in, out, {3.0f, lanczos3}, false, i);
    case Interpolation::kLanczos5:
      return scale_and_translate_taps(in, out, {5.0f, lanczos5}, false, i);
    case Interpolation::kArea: {
      const float lo = fi * scale, hi = (fi + 1.0f) * scale;
      const auto first = static_cast<std::int64_t>(std::floor(lo));
      const auto end = static_cast<std::int64_t>(std::ceil(hi));
      for (std::int64_t v = first; v < end; ++v) {
        const auto fv = static_cast<float>(v);
        const float covered = fv < lo ? (fv + 1 > hi ? scale : fv + 1 - lo) : (fv + 1 > hi ? hi - fv : 1.0f);
        add_tap(taps, bound(v, in), static_cast<double>(covered) / static_cast<double>(scale));
      }
      break;
    }
  }
  return taps;
}

// The table of `key` in `kept` (a thread-local map: replicas' threads each keep theirs), built
// by build() on first use; a build that throws leaves no entry behind.
template <typename Key, typename T, typename Build>
const T& kept_table(std::map<Key, std::unique_ptr<T>>& kept, const Key& key, Build build) {
  auto& slot = kept[key];
  if (!slot) {
    try {
      slot = std::make_unique<T>(build());
    } catch (...) {
      kept.erase(key);
      throw;
    }
  }
  return *slot;
}

using AxisKey = std::tuple<std::int64_t, std::int64_t, Resize>;

// The weights of (in, out, resize), built once per thread.
const ResizeWeights& kept_weights(std::int64_t in, std::int64_t out, Resize resize) {
  thread_local std::map<AxisKey, std::unique_ptr<ResizeWeights>> kept;
  return kept_table(kept, AxisKey{in, out, resize}, [&] {
    try {
      return resize_weights(in, out, resize.method, resize.antialias);
    } catch (const std::bad_alloc&) {  // a size far past any image (a hostile file's)
      throw ResourceError(detail::concat("resize_images: host memory ran out building the ",
                                         interpolation_name(resize.method), resize.antialias ? " (antialiased)" : "",
                                         " weights of ", in, " -> ", out, " pixels"));
    }
  });
}

// Whether each output is its own input, whole: the axis needs no computing.
bool is_identity(const ResizeWeights& a, std::int64_t in, std::int64_t out) {
  if (in != out || a.taps != 1) return false;
  for (std::size_t i = 0; i < a.index.size(); ++i)
    if (a.index[i] != static_cast<std::int64_t>(i) || a.weight[i] != 1.0f) return false;
  return true;
}

// The taps of (in, out, resize)'s gradient (transposed_taps of its weights), built once per
// thread as kept_weights' are; a size far past any image is refused there (ResourceError).
const HostTaps& kept_transposed(std::int64_t in, std::int64_t out, Resize resize) {
  thread_local std::map<AxisKey, std::unique_ptr<HostTaps>> kept;
  return kept_table(kept, AxisKey{in, out, resize}, [&] { return transposed_taps(kept_weights(in, out, resize), in); });
}

using PlaneKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, Resize>;

// Both axes' taps as one table over an image's pixels (h * w inputs, rows' outputs * cols'
// outputs): output (i, j) reads input (a, b), b < w, with weight rows[i, a] * cols[j, b] in float,
// rows' taps outer.
HostTaps plane_taps(const HostTaps& rows, const HostTaps& cols, std::int64_t w) {
  const auto out_h = static_cast<std::int64_t>(rows.index.size()) / rows.taps;
  const auto out_w = static_cast<std::int64_t>(cols.index.size()) / cols.taps;
  const std::int64_t taps = rows.taps * cols.taps;
  HostTaps t{.taps = taps,
             .index = std::vector<std::int64_t>(static_cast<std::size_t>(out_h * out_w * taps)),
             .weight = std::vector<float>(static_cast<std::size_t>(out_h * out_w * taps))};
  std::size_t e = 0;
  for (std::int64_t i = 0; i < out_h; ++i)
    for (std::int64_t j = 0; j < out_w; ++j)
      for (std::int64_t a = i * rows.taps; a < (i + 1) * rows.taps; ++a)
        for (std::int64_t b = j * cols.taps; b < (j + 1) * cols.taps; ++b, ++e) {
          const auto ra = static_cast<std::size_t>(a), cb = static_cast<std::size_t>(b);
          t.index[e] = rows.index[ra] * w + cols.index[cb];
          t.weight[e] = rows.weight[ra] * cols.weight[cb];
        }
  return t;
}

// The plane taps of (h, w) -> (out_h, out_w) and their gradient's, built once per thread.
const HostTaps& kept_plane(const PlaneKey& key) {
  thread_local std::map<PlaneKey, std::unique_ptr<HostTaps>> kept;
  return kept_table(kept, key, [&] {
    const auto& [h, w, out_h, out_w, resize] = key;
    return plane_taps(kept_weights(h, out_h, resize), kept_weights(w, out_w, resize), w);
  });
}
const HostTaps& kept_plane_transposed(const PlaneKey& key) {
  thread_local std::map<PlaneKey, std::unique_ptr<HostTaps>> kept;
  return kept_table(kept, key, [&] { return transposed_taps(kept_plane(key), std::get<0>(key) * std::get<1>(key)); });
}

// A table of taps as two kept device constants, index and weights, named by `what` (string
// literals) and `params` (the sizes and the resize's code).
ResampleTaps device_taps(const HostTaps& t, std::array<const char*, 2> what,
                         std::initializer_list<std::int64_t> params) {
  const auto rows = static_cast<std::int64_t>(t.index.size()) / t.taps;
  const auto first = [&](const auto& v, std::int64_t n) {
    using V = typename std::decay_t<decltype(v)>::value_type;
    return Tensor::from_vector(std::vector<V>(v.begin(), v.begin() + n * t.taps), Shape{n, t.taps});
  };
  const auto index = [&](std::int64_t n) { return first(t.index, n); };
  const auto weight = [&](std::int64_t n) { return first(t.weight, n); };
  return {device_constant(ConstantKey(what[0], params), rows, index),
          device_constant(ConstantKey(what[1], params), rows, weight)};
}

// Whether a tape on this thread records an op reading x (resample then needs the gradient's taps).
bool taped(const Tensor& x) {
  const Tensor* inputs[] = {&x};
  const OpRecorder* r = current_recorder();
  return r && r->wants(inputs, 1);
}

// The names of a resample's kept tables: its taps' and its gradient's.
struct TableNames {
  std::array<const char*, 2> taps, transposed;
};

// x (rows, in, inner) resampled by `forward` (the resample kernel: the work of the taps alone),
// its gradient the same kernel over transposed() (built only when a tape records x); both
// tables kept device constants named by `names` and `params`.
template <typename Transposed>
Tensor resample_kept(const Tensor& x, const HostTaps& forward, const Transposed& transposed, const TableNames& names,
                     std::initializer_list<std::int64_t> params) {
  const ResampleTaps taps = device_taps(forward, names.taps, params);
  if (!taped(x)) return resample(x, taps, ResampleTaps{});  // inference: no transposed taps
  return resample(x, taps, device_taps(transposed(), names.transposed, params));
}

// One axis: x viewed as (rows, in, inner) becomes (rows, out, inner), out[r, o, :] the sum of
// the taps of output o over x[r, :, :].
Tensor resize_axis(const Tensor& x, std::int64_t rows, std::int64_t in, std::int64_t out, std::int64_t inner,
                   Resize resize) {
  const ResizeWeights& a = kept_weights(in, out, resize);
  if (is_identity(a, in, out)) return reshape(x, Shape{rows, out, inner});
  static constexpr TableNames kNames{{"resize_images taps index", "resize_images taps weight"},
                                     {"resize_images transposed taps index", "resize_images transposed taps weight"}};
  return resample_kept(
      reshape(x, Shape{rows, in, inner}), a, [&]() -> const HostTaps& { return kept_transposed(in, out, resize); },
      kNames, {in, out, resize.code()});
}

// The height of images x (n, h, w, c): each example's rows, (n, h, w * c) -> (n, out, w * c).
Tensor resize_height(const Tensor& x, std::int64_t out, Resize resize) {
  const std::int64_t n = x.dim(0), w = x.dim(2), c = x.dim(3);
  return reshape(resize_axis(x, n, x.dim(1), out, w * c, resize), Shape{n, out, w, c});
}

// The width of images x (n, h, w, c): each image row's pixels, (n * h, w, c) -> (n * h, out, c).
Tensor resize_width(const Tensor& x, std::int64_t out, Resize resize) {
  const std::int64_t n = x.dim(0), h = x.dim(1), c = x.dim(3);
  return reshape(resize_axis(x, n * h, x.dim(2), out, c, resize), Shape{n, h, out, c});
}

// Whether both axes of x (n, h, w, c) in one pass (resize_plane) beat one after the other
// (bench/resize_bench): where both grow with 2 x 2 taps at most (bilinear, a U-Net decoder's
// UpSampling2D) on rows of 32 channels or more, the intermediate's write and read cost more than
// the sums done twice; more taps multiply the sums, fewer channels leave each tap's table entry
// the larger read. Plane tables of 2^18 entries at most (3 MiB each of device_constant's budget:
// a 256 x 256 output).
bool plane_pays(const Tensor& x, std::int64_t out_h, std::int64_t out_w, Resize resize) {
  constexpr std::int64_t kMaxEntries = std::int64_t{1} << 18;
  const std::int64_t h = x.dim(1), w = x.dim(2), c = x.dim(3);
  if (out_h <= h || out_w <= w || c < 32 || out_h > kMaxEntries / out_w) return false;
  const std::int64_t taps = kept_weights(h, out_h, resize).taps * kept_weights(w, out_w, resize).taps;
  return taps <= 4 && out_h * out_w * taps <= kMaxEntries;
}

// Both axes of images x (n, h, w, c) in one pass over the plane taps: (n, h * w, c) ->
// (n, out_h * out_w, c), no intermediate written and read again.
Tensor resize_plane(const Tensor& x, std::int64_t out_h, std::int64_t out_w, Resize resize) {
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const PlaneKey key{h, w, out_h, out_w, resize};
  static constexpr TableNames kNames{
      {"resize_images plane taps index", "resize_images plane taps weight"},
      {"resize_images plane transposed taps index", "resize_images plane transposed taps weight"}};
  const Tensor y = resample_kept(
      reshape(x, Shape{n, h * w, c}), kept_plane(key), [&]() -> const HostTaps& { return kept_plane_transposed(key); },
      kNames, {h, w, out_h, out_w, resize.code()});
  return reshape(y, Shape{n, out_h, out_w, c});
}
}  // namespace

Interpolation parse_interpolation(const std::string& name, const char* cls) {
  for (const auto& [method, n] : kNames)
    if (name == n) return method;
  throw ValueError(detail::concat(cls, ": interpolation '", name,
                                  "' is not supported: Keras' and lockstep's are \"nearest\", \"bilinear\", "
                                  "\"bicubic\", \"lanczos3\", \"lanczos5\" and \"area\""));
}

const char* interpolation_name(Interpolation method) {
  for (const auto& [m, n] : kNames)
    if (m == method) return n;
  return "?";
}

ResizeWeights resize_weights(std::int64_t in, std::int64_t out, Interpolation method, bool antialias) {
  LOCKSTEP_CHECK(in > 0 && out > 0, "resize_images: sizes must be positive, got ", in, " -> ", out);
  std::vector<Taps> all(static_cast<std::size_t>(out));
  std::size_t taps = 1;
  for (std::int64_t i = 0; i < out; ++i) {
    Taps& t = all[static_cast<std::size_t>(i)];
    t = output_taps(in, out, Resize(method, antialias), i);
    taps = std::max(taps, t.size());
  }
  ResizeWeights r{.taps = static_cast<std::int64_t>(taps),
                  .index = std::vector<std::int64_t>(static_cast<std::size_t>(out) * taps, 0),
                  .weight = std::vector<float>(static_cast<std::size_t>(out) * taps, 0.0f)};
  for (std::size_t i = 0; i < all.size(); ++i)
    for (std::size_t k = 0; k < all[i].size(); ++k) {
      r.index[i * taps + k] = all[i][k].first;
      r.weight[i * taps + k] = static_cast<float>(all[i][k].second);
    }
  return r;
}

Tensor resize_images(const Tensor& x, std::int64_t out_h, std::int64_t out_w, Interpolation method,
                     bool antialias) {
  LOCKSTEP_CHECK(x.rank() == 4, "resize_images: needs images (batch, height, width, channels), got ",
                 x.shape().str());
  LOCKSTEP_CHECK(out_h > 0 && out_w > 0, "resize_images: the size must be positive, got (", out_h, ", ",
                 out_w, ")");
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const Shape out{n, out_h, out_w, c};
  // An empty batch (a replica's share of a short last batch): nothing to gather, and reshape keeps
  // the tape's path to x, so that the layers before get their (zero) gradients.
  if (x.numel() == 0) return reshape(x, out);
  if (h == out_h && w == out_w) return x;
  const Resize resize(method, antialias);
  if (method == Interpolation::kNearest) {  // one gather of whole pixels
    const ResizeWeights& rows = kept_weights(h, out_h, resize);
    const ResizeWeights& cols = kept_weights(w, out_w, resize);
    const Tensor index =
        device_constant({"resize_images nearest pixels: h, w, out_h, out_w", {h, w, out_h, out_w}}, n,
                        [&](std::int64_t examples) {
                          std::vector<std::int64_t> v(static_cast<std::size_t>(examples * out_h * out_w));
                          std::size_t r = 0;
                          for (std::int64_t b = 0; b < examples; ++b)
                            for (const std::int64_t i : rows.index)
                              for (const std::int64_t j : cols.index) v[r++] = (b * h + i) * w + j;
                          return Tensor::from_vector(v, Shape{examples, out_h * out_w});
                        })
            .reshape(Shape{n * out_h * out_w});
    return reshape(gather_rows(reshape(x, Shape{n * h * w, c}), index), out);
  }
  if (plane_pays(x, out_h, out_w, resize)) return resize_plane(x, out_h, out_w, resize);
  // The axis that leaves the smaller intermediate first.
  if (h * out_w <= out_h * w) return resize_height(resize_width(x, out_w, resize), out_h, resize);
  return resize_width(resize_height(x, out_h, resize), out_w, resize);
}

}  // namespace lockstep::layers
