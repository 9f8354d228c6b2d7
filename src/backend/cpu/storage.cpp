// Storage kernels for every dtype (fill, cast, row gather/scatter, the multi-buffer combine
// that collectives run, argmax and accuracy's matches, label range checks) and the CPU's DeviceOps.
#include <cmath>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/combine_block.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/half_convert.hpp"
#include "backend/labels.hpp"

namespace lockstep::backend::cpu {

namespace {
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// Numpy's value conversion: through float32 for the 16-bit floats, truncation toward zero
// for float -> int (out-of-range values are undefined in C++, so they saturate here).
template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return convert<To>(to_float(v));
  } else if constexpr (std::is_same_v<To, Float16>) {
    return to_float16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (std::isnan(v)) return To{0};
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
    const double d = static_cast<double>(v);
    if (d <= lo) return std::numeric_limits<To>::min();
    if (d >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
void cast_loop(ComputeContext& ctx, const From* src, To* dst, std::int64_t n) {
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    if constexpr (std::is_same_v<From, float> && kIsHalf<To>) {
      narrow_half(src + b, dst + b, e - b);
    } else if constexpr (kIsHalf<From> && std::is_same_v<To, float>) {
      widen_half(src + b, dst + b, e - b);
    } else {
      for (auto i = b; i < e; ++i) dst[i] = convert<To>(src[i]);
    }
  });
}

template <typename T>
float as_float(T v) {
  if constexpr (kIsHalf<T>) return to_float(v);
  else return static_cast<float>(v);
}

// Index of the first largest of at(0) .. at(n - 1), floats (NaN wins, as in numpy): argmax's rule.
template <typename At>
std::int64_t first_largest(std::int64_t n, At at) {
  std::int64_t arg = 0;
  float best = at(0);
  for (std::int64_t a = 1; a < n && !std::isnan(best); ++a) {
    const float v = at(a);
    if (v > best || std::isnan(v)) {
      best = v;
      arg = a;
    }
  }
  return arg;
}

// accuracy_state's rows against labels of type L.
template <typename T, typename L>
std::int64_t count_matches(const T* pred, std::int64_t rows, std::int64_t cols, const L* labels,
                           std::int64_t label_cols, bool compare_as_float) {
  std::int64_t matches = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* p = pred + r * cols;
    const std::int64_t arg = first_largest(cols, [p](std::int64_t a) { return as_float(p[a]); });
    bool match;
    if (label_cols > 1) {
      const L* l = labels + r * label_cols;
      match = arg == first_largest(label_cols, [l](std::int64_t a) { return convert<float>(l[a]); });
    } else {
      match = label_matches(arg, labels[r], convert<float>(labels[r]), compare_as_float);
    }
    matches += match ? 1 : 0;
  }
  return matches;
}
}  // namespace

template <typename T>
void fill(ComputeContext& ctx, void* dstv, std::int64_t n, double value) {
  T* dst = static_cast<T*>(dstv);
  const T v = convert<T>(static_cast<std::conditional_t<std::is_integral_v<T>, double, float>>(value));
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) dst[i] = v;
  });
}

template <typename T>
void cast(ComputeContext& ctx, const void* srcv, DType to, void* dst, std::int64_t n) {
  const T* src = static_cast<const T*>(srcv);
  visit_dtype(to, [&](auto to_type) {
    cast_loop(ctx, src, static_cast<typename decltype(to_type)::type*>(dst), n);
  });
}

template <typename T>
void gather_rows(ComputeContext& ctx, const void* srcv, const std::int64_t* index, std::int64_t rows,
                 std::int64_t row, std::int64_t src_rows, void* dstv) {
  const T* src = static_cast<const T*>(srcv);
  T* dst = static_cast<T*>(dstv);
  const auto bytes = static_cast<std::size_t>(row) * sizeof(T);
  if (bytes == 0) return;
  // A batch of shuffled rows is memory-bound: the device's threads copy parts of it at once.
  // Each copy starts with a cache miss on a random row, so the rows kAhead ahead are prefetched
  // while this one is copied (whole rows, up to kPrefetchBytes): the misses overlap.
  constexpr std::int64_t kAhead = 4;
  constexpr std::size_t kPrefetchBytes = 8192;
  const std::size_t prefetch_bytes = std::min(bytes, kPrefetchBytes);
  const char* base = static_cast<const char*>(srcv);
  // Rows [from, to) of the batch, clipped to the part's end.
  auto prefetch_rows = [&](std::int64_t from, std::int64_t to, std::int64_t end) {
    for (std::int64_t a = from; a < std::min(end, to); ++a)
      for (std::size_t b = 0; b < prefetch_bytes && inside(index[a], src_rows); b += 64)
        __builtin_prefetch(base + index[a] * bytes + b);
  };
  parallel_rows(ctx, rows, row, [&](std::int64_t begin, std::int64_t end) {
    prefetch_rows(begin, begin + kAhead, end);
    for (std::int64_t r = begin; r < end;) {
      if (!inside(index[r], src_rows)) {  // a device's bad index (raised later): zeros, no read outside src
        std::fill(dst + r * row, dst + (r + 1) * row, T{});
        ++r;
        continue;
      }
      std::int64_t run = 1;  // consecutive indices (an unshuffled batch) go in one copy
      while (r + run < end && index[r + run] == index[r] + run && index[r + run] < src_rows) ++run;
      prefetch_rows(r + kAhead, r + run + kAhead, end);
      std::memcpy(dst + r * row, src + index[r] * row, static_cast<std::size_t>(run) * bytes);
      r += run;
    }
  });
}

template <typename T>
void gather_rows_scaled(ComputeContext& ctx, const void* srcv, const std::int64_t* index, std::int64_t rows,
                        std::int64_t row, std::int64_t src_rows, float scale, float* dst) {
  const T* src = static_cast<const T*>(srcv);
  const auto bytes = static_cast<std::size_t>(row) * sizeof(T);
  if (bytes == 0) return;
  // Rows are taken in blocks of about kBlockBytes: first one load per cache line of every row of
  // the block, then the block is converted from cache. The loads do not depend on each other, so
  // their misses overlap; converting row by row, each row's misses came one row at a time, and
  // prefetch instructions did not help (AMD EPYC VM: 64 random uint8 rows of 784 bytes in 11.5 to
  // 17.7 us with or without __builtin_prefetch 2 to 64 rows ahead, 7.5 us this way; the float
  // rows' memcpy above measured no better with it).
  constexpr std::size_t kBlockBytes = 16 << 10;
  const auto per_block = static_cast<std::int64_t>(std::max<std::size_t>(1, kBlockBytes / bytes));
  const char* base = static_cast<const char*>(srcv);
  parallel_rows(ctx, rows, row, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b0 = begin; b0 < end; b0 += per_block) {
      const std::int64_t b1 = std::min(end, b0 + per_block);
      unsigned touched = 0;
      for (std::int64_t r = b0; r < b1; ++r) {
        if (!inside(index[r], src_rows)) continue;
        const char* p = base + index[r] * static_cast<std::int64_t>(bytes);
        for (std::size_t o = 0; o < bytes; o += 64) touched += static_cast<unsigned char>(p[o]);
        touched += static_cast<unsigned char>(p[bytes - 1]);
      }
      asm volatile("" : : "r"(touched));  // the loads are the point: keep them
      for (std::int64_t r = b0; r < b1; ++r) {
        float* d = dst + r * row;
        if (!inside(index[r], src_rows)) {  // zeros, as gather_rows
          std::fill(d, d + row, 0.0f);
          continue;
        }
        const T* s = src + index[r] * row;
        for (std::int64_t i = 0; i < row; ++i) d[i] = convert<float>(s[i]) * scale;  // as cast_scaled
      }
    }
  });
}

template <typename T>
void scatter_add_rows(ComputeContext&, const void* srcv, const std::int64_t* index, std::int64_t rows,
                      std::int64_t row, std::int64_t dst_rows, void* dstv) {
  const T* src = static_cast<const T*>(srcv);
  T* dst = static_cast<T*>(dstv);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (!inside(index[r], dst_rows)) continue;  // a device's bad index (raised later): skipped
    T* d = dst + index[r] * row;
    const T* s = src + r * row;
    for (std::int64_t c = 0; c < row; ++c) {
      if constexpr (kIsHalf<T>) d[c] = convert<T>(to_float(d[c]) + to_float(s[c]));
      else d[c] = static_cast<T>(d[c] + s[c]);
    }
  }
}

namespace {
// Blocks are combined in a local buffer first because outputs may also be inputs. The
// accumulator is float32 for floating types (and for 16-bit floats, so that N replicas'
// sum is rounded once), the type itself for integers.
template <ReduceOp Op, typename T>
void combine_impl(const T* const* in, int n_in, T* const* out, int n_out, std::int64_t begin, std::int64_t end) {
  using A = std::conditional_t<kIsHalf<T>, float, std::conditional_t<std::is_integral_v<T>, std::int64_t, T>>;
  constexpr std::int64_t kBlock = 1024;
  alignas(64) A acc[kBlock];
  auto load = [](T v) -> A {
    if constexpr (kIsHalf<T>) return to_float(v);
    else return static_cast<A>(v);
  };
  for (std::int64_t s = begin; s < end; s += kBlock) {
    const std::int64_t len = std::min(kBlock, end - s);
    combine_block<Op>(in, n_in, s, len, acc, load);
    if constexpr (Op == ReduceOp::kMean) {
      const A fn = static_cast<A>(n_in);
      for (std::int64_t i = 0; i < len; ++i) acc[i] /= fn;
    }
    if constexpr (std::is_same_v<A, T>) {
      // Plain stores: streaming (non-temporal) stores measured 30% slower here even at 256 MiB.
      for (int j = 0; j < n_out; ++j) std::memcpy(out[j] + s, acc, static_cast<std::size_t>(len) * sizeof(T));
    } else {
      for (int j = 0; j < n_out; ++j)
        for (std::int64_t i = 0; i < len; ++i) out[j][s + i] = convert<T>(acc[i]);
    }
  }
}
}  // namespace

template <typename T>
void combine(ComputeContext&, ReduceOp op, const void* const* inv, int n_in, void* const* outv, int n_out,
             std::int64_t begin, std::int64_t end) {
  const T* const* in = reinterpret_cast<const T* const*>(inv);
  T* const* out = reinterpret_cast<T* const*>(outv);
  switch (op) {
    case ReduceOp::kSum: return combine_impl<ReduceOp::kSum>(in, n_in, out, n_out, begin, end);
    case ReduceOp::kMean: return combine_impl<ReduceOp::kMean>(in, n_in, out, n_out, begin, end);
    case ReduceOp::kMax: return combine_impl<ReduceOp::kMax>(in, n_in, out, n_out, begin, end);
    case ReduceOp::kMin: return combine_impl<ReduceOp::kMin>(in, n_in, out, n_out, begin, end);
  }
}

template <typename T>
void argmax(ComputeContext&, const void* xv, std::int64_t* arg_out, std::int64_t outer, std::int64_t axis,
            std::int64_t inner) {
  const T* x = static_cast<const T*>(xv);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const T* p = x + o * axis * inner + i;
      std::int64_t arg = 0;
      if constexpr (std::is_integral_v<T>) {
        // Integers compare as themselves: through float32, int32/int64 values past 2^24 that
        // differ compared equal and the first one won (found by the parity harness).
        for (std::int64_t a = 1; a < axis; ++a)
          if (p[a * inner] > p[arg * inner]) arg = a;
      } else {
        arg = first_largest(axis, [p, inner](std::int64_t a) { return as_float(p[a * inner]); });
      }
      arg_out[o * inner + i] = arg;
    }
  }
}

template <typename T>
void accuracy_state(ComputeContext&, const void* predv, std::int64_t rows, std::int64_t cols, const void* labels,
                    DType label_dtype, std::int64_t label_cols, bool as_float, float* state) {
  const T* pred = static_cast<const T*>(predv);
  const std::int64_t matches = visit_dtype(label_dtype, [&](auto label_type) {
    using L = typename decltype(label_type)::type;
    return count_matches(pred, rows, cols, static_cast<const L*>(labels), label_cols, as_float);
  });
  state[0] = static_cast<float>(matches);
  state[1] = static_cast<float>(rows);
}

template <typename T>
std::int64_t first_outside(ComputeContext&, const void* labelsv, std::int64_t n, std::int64_t limit) {
  const T* l = static_cast<const T*>(labelsv);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t v = label_index(l[i]);
    if (v < 0 || v >= limit) return i;
  }
  return -1;
}

template <typename T>
void mark_outside(ComputeContext&, const void* labelsv, std::int64_t n, std::int64_t limit, std::int64_t site,
                  ErrorMark* mark) {
  // Emulated GPUs run it (the CPU checks at once with first_outside); the host may read the mark
  // from another thread: `set` last, released.
  std::atomic_ref<std::uint32_t> set(mark->set);
  if (set.load(std::memory_order_acquire) != 0) return;
  const T* l = static_cast<const T*>(labelsv);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t v = label_index(l[i]);
    if (inside(v, limit)) continue;
    mark->index = i;
    mark->value = v;
    mark->limit = limit;
    mark->site = site;
    set.store(1, std::memory_order_release);
    return;
  }
}

template <typename T>
void cast_scaled(ComputeContext& ctx, const void* srcv, float scale, float* dst, std::int64_t n) {
  const T* src = static_cast<const T*>(srcv);
  const auto run = [=](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) dst[i] = convert<float>(src[i]) * scale;
  };
  // Split only large tensors. The first op of a step that takes pixels, on a batch (128 x 784:
  // half a megabyte written), cost 5% of the flagship's step on a pool of 2 threads when split
  // at kGrain (waking a worker, or waiting for one busy with the next batch's gather ahead), 1.5%
  // on one thread (bench/fit_overhead, uint8 mode).
  constexpr std::int64_t kSplitGrain = std::int64_t{1} << 20;
  if (n < 2 * kSplitGrain || ctx.threads() == 1) return run(0, n);
  ctx.pool().parallel_for(n, kSplitGrain, run);
}

template <typename T>
void transpose(ComputeContext& ctx, const TransposeDesc& d, const void* srcv, void* dstv) {
  const T* src = static_cast<const T*>(srcv);
  T* dst = static_cast<T*>(dstv);
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  if (n == 0) return;
  // Rows of the output's last axis: each row's start found once, then a strided walk of src.
  const int last = d.rank - 1;
  const std::int64_t row = d.rank == 0 ? 1 : d.dims[last], step = d.rank == 0 ? 0 : d.src_strides[last];
  parallel_rows(ctx, n / row, row, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::int64_t rest = r, s = 0;
      for (int i = last - 1; i >= 0; --i) {
        s += rest % d.dims[i] * d.src_strides[i];
        rest /= d.dims[i];
      }
      T* out = dst + r * row;
      if (step == 1) {  // the last axis stays last (a recurrent layer's [batch, steps, f] -> [steps, batch, f])
        std::copy(src + s, src + s + row, out);
        continue;
      }
      for (std::int64_t j = 0; j < row; ++j) out[j] = src[s + j * step];
    }
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Any, fill)
LOCKSTEP_INSTANTIATE_KERNEL(Any, cast)
LOCKSTEP_INSTANTIATE_KERNEL(Any, gather_rows)
LOCKSTEP_INSTANTIATE_KERNEL(Any, scatter_add_rows)
LOCKSTEP_INSTANTIATE_KERNEL(Any, combine)
LOCKSTEP_INSTANTIATE_KERNEL(Any, argmax)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, accuracy_state)
LOCKSTEP_INSTANTIATE_KERNEL(Any, transpose)
LOCKSTEP_INSTANTIATE_KERNEL(Integer, first_outside)
LOCKSTEP_INSTANTIATE_KERNEL(Integer, mark_outside)
LOCKSTEP_INSTANTIATE_KERNEL(Integer, cast_scaled)
LOCKSTEP_INSTANTIATE_KERNEL(Integer, gather_rows_scaled)

// ---- DeviceOps: host memory is the device's memory ----
namespace {
void copy(ComputeContext&, void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}
void zero(ComputeContext&, void* dst, std::size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}
bool equal_bytes(ComputeContext&, const void* a, const void* b, std::size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}
}  // namespace

const DeviceOps& device_ops() {
  static const DeviceOps ops{
      .copy = copy, .copy_to_host = copy, .copy_from_host = copy, .zero = zero, .equal_bytes = equal_bytes};
  return ops;
}

}  // namespace lockstep::backend::cpu
