// Storage kernels for every dtype (fill, cast, compare, row gather/scatter, the multi-buffer
// combine that collectives run, argmax and accuracy's matches, label range checks) and byte comparison. Each follows
// the CPU backend's semantics (src/backend/cpu/storage.cpp) element for element.
#include <climits>
#include <cmath>
#include <limits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/labels.hpp"

namespace lockstep::backend::cuda {

BcastKind bcast_kind(const BroadcastDesc& d, std::int64_t* numel) {
  std::int64_t n = 1;
  bool a_contig = true, b_contig = true, b_scalar = true, a_scalar = true;
  for (int i = d.rank - 1; i >= 0; --i) {
    if (d.dims[i] != 1) {
      a_contig &= d.a_strides[i] == n;
      b_contig &= d.b_strides[i] == n;
      b_scalar &= d.b_strides[i] == 0;
      a_scalar &= d.a_strides[i] == 0;
    }
    n *= d.dims[i];
  }
  *numel = n;
  if (a_contig && b_contig) return BcastKind::kContiguous;
  if (a_contig && b_scalar) return BcastKind::kScalarB;
  if (a_scalar && b_contig) return BcastKind::kScalarA;
  return BcastKind::kGeneral;
}

namespace {
// numpy's conversions, as the CPU's convert<To>(From): 16-bit floats through float32, floats to
// integers truncated toward zero and saturated (NaN -> 0), integers to integers wrapped.
template <typename To, typename From>
__device__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return convert<To>(Elem<From>::load(v));
  } else if constexpr (kIsHalf<To>) {
    return Elem<To>::store(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (v != v) return To{0};
    const double lo = static_cast<double>(std::numeric_limits<To>::min());
    const double hi = static_cast<double>(std::numeric_limits<To>::max());
    const double d = static_cast<double>(v);
    if (d <= lo) return std::numeric_limits<To>::min();
    if (d >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, std::int64_t n, T v) {
  LOCKSTEP_GRID_LOOP(i, n) dst[i] = v;
}

template <typename From, typename To>
__global__ void cast_kernel(const From* src, To* dst, std::int64_t n) {
  LOCKSTEP_GRID_LOOP(i, n) dst[i] = convert<To>(src[i]);
}

// float32(src) * scale, one rounding (the CPU kernel's rule: a Rescaling of integer pixels).
template <typename T>
__global__ void cast_scaled_kernel(const T* src, float scale, float* dst, std::int64_t n) {
  LOCKSTEP_GRID_LOOP(i, n) dst[i] = __fmul_rn(static_cast<float>(src[i]), scale);
}

template <typename T>
__device__ inline auto compare_value(T v) {
  if constexpr (kIsHalf<T>) return Elem<T>::load(v);
  else return v;
}

template <typename T>
__global__ void compare_kernel(CompareOp op, BroadcastDesc d, BcastKind kind, const T* a, const T* b,
                               std::uint8_t* out, std::int64_t n) {
  LOCKSTEP_GRID_LOOP(i, n) {
    std::int64_t ao, bo;
    bcast_offsets(d, kind, i, &ao, &bo);
    const auto x = compare_value(a[ao]);
    const auto y = compare_value(b[bo]);
    bool r = false;
    switch (op) {
      case CompareOp::kEqual: r = x == y; break;
      case CompareOp::kNotEqual: r = x != y; break;
      case CompareOp::kLess: r = x < y; break;
      case CompareOp::kLessEqual: r = x <= y; break;
      case CompareOp::kGreater: r = x > y; break;
      case CompareOp::kGreaterEqual: r = x >= y; break;
    }
    out[i] = r ? 1 : 0;
  }
}

template <typename T>
__global__ void gather_kernel(const T* src, const std::int64_t* index, std::int64_t rows, std::int64_t row,
                              std::int64_t src_rows, T* dst) {
  LOCKSTEP_GRID_LOOP(i, rows * row) {
    const std::int64_t r = i / row, c = i - r * row;
    dst[i] = inside(index[r], src_rows) ? src[index[r] * row + c] : T{};  // outside: zeros (raised later)
  }
}

// Rows of integers gathered as float32 * scale, one rounding (cast_scaled_kernel's rule).
template <typename T>
__global__ void gather_scaled_kernel(const T* src, const std::int64_t* index, std::int64_t rows, std::int64_t row,
                                     std::int64_t src_rows, float scale, float* dst) {
  LOCKSTEP_GRID_LOOP(i, rows * row) {
    const std::int64_t r = i / row, c = i - r * row;
    dst[i] = inside(index[r], src_rows) ? __fmul_rn(static_cast<float>(src[index[r] * row + c]), scale) : 0.0f;
  }
}

// One thread per column, rows in order: repeated indices add in the CPU's order, without atomics
// (bit-reproducible, and bit-identical to the CPU for every dtype).
template <typename T>
__global__ void scatter_add_kernel(const T* src, const std::int64_t* index, std::int64_t rows, std::int64_t row,
                                   std::int64_t dst_rows, T* dst) {
  LOCKSTEP_GRID_LOOP(c, row) {
    for (std::int64_t r = 0; r < rows; ++r) {
      if (!inside(index[r], dst_rows)) continue;  // a bad index (raised later): skipped
      T* d = dst + index[r] * row + c;
      const T s = src[r * row + c];
      if constexpr (kIsHalf<T>) *d = Elem<T>::store(Elem<T>::load(*d) + Elem<T>::load(s));
      else *d = static_cast<T>(*d + s);
    }
  }
}

constexpr int kMaxCombine = 64;
struct CombinePtrs {
  const void* in[kMaxCombine];
  void* out[kMaxCombine];
};

template <ReduceOp Op, typename A>
__device__ inline A combine2(A a, A b) {
  if constexpr (Op == ReduceOp::kMax) return a > b ? a : b;
  else if constexpr (Op == ReduceOp::kMin) return a < b ? a : b;
  else return a + b;
}

// Each thread reads element i of every input, then writes it to every output: outputs may
// alias inputs element for element. Left fold in input order, float32 for 16-bit floats,
// int64 for integers (the CPU's accumulators).
template <ReduceOp Op, typename T>
__global__ void combine_kernel(CombinePtrs p, int n_in, int n_out, std::int64_t begin, std::int64_t end) {
  using A = std::conditional_t<kIsHalf<T>, float, std::conditional_t<std::is_integral_v<T>, std::int64_t, T>>;
  auto load = [](T v) -> A {
    if constexpr (kIsHalf<T>) return Elem<T>::load(v);
    else return static_cast<A>(v);
  };
  LOCKSTEP_GRID_LOOP(k, end - begin) {
    const std::int64_t i = begin + k;
    A acc = load(static_cast<const T*>(p.in[0])[i]);
    for (int j = 1; j < n_in; ++j) acc = combine2<Op>(acc, load(static_cast<const T*>(p.in[j])[i]));
    if constexpr (Op == ReduceOp::kMean) acc /= static_cast<A>(n_in);
    T out;
    if constexpr (kIsHalf<T>) out = Elem<T>::store(acc);
    else out = static_cast<T>(acc);
    for (int j = 0; j < n_out; ++j) static_cast<T*>(p.out[j])[i] = out;
  }
}

// A warp per output: lanes scan strided, then the first-largest rule (NaN wins) picks. Integers
// compare as themselves (through float32, large int32/int64 values would tie).
template <typename T>
__global__ void argmax_kernel(const T* x, std::int64_t* arg, std::int64_t outer, std::int64_t axis, std::int64_t inner) {
  const int lane = threadIdx.x % 32;
  LOCKSTEP_WARP_ROW_LOOP(r, outer * inner) {
    const std::int64_t o = r / inner, in = r - o * inner;
    const T* p = x + o * axis * inner + in;
    if constexpr (std::is_integral_v<T>) {
      std::int64_t best_i = -1;
      T best{};
      for (std::int64_t a = lane; a < axis; a += 32) {
        const T v = p[a * inner];
        if (best_i < 0 || v > best) best = v, best_i = a;
      }
      for (int off = 16; off > 0; off >>= 1) {
        const T ov = __shfl_down_sync(0xffffffffu, best, off);
        const std::int64_t oi = __shfl_down_sync(0xffffffffu, best_i, off);
        if (oi >= 0 && (best_i < 0 || ov > best || (ov == best && oi < best_i))) best = ov, best_i = oi;
      }
      if (lane == 0) arg[r] = best_i < 0 ? 0 : best_i;
    } else {
      ArgBest b{Elem<T>::load(p[0]), 0};
      for (std::int64_t a = lane; a < axis; a += 32) b = arg_better(b, ArgBest{Elem<T>::load(p[a * inner]), a});
      b = warp_arg_best(b);
      if (lane == 0) arg[r] = b.i;
    }
  }
}

// accuracy_state: one block (a batch's rows), a warp per row as argmax_kernel, each warp's
// matches counted in integers and added in warp order by thread 0: no atomics, the CPU's count.
template <typename T, typename L>
__global__ void accuracy_state_kernel(const T* pred, std::int64_t rows, std::int64_t cols, const L* labels,
                                      std::int64_t label_cols, bool as_float, float* state) {
  __shared__ std::int64_t warp_matches[kRowsPerBlock];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::int64_t matches = 0;
  for (std::int64_t r = warp; r < rows; r += kRowsPerBlock) {
    const T* p = pred + r * cols;
    ArgBest b{Elem<T>::load(p[0]), 0};
    for (std::int64_t a = lane; a < cols; a += 32) b = arg_better(b, ArgBest{Elem<T>::load(p[a]), a});
    b = warp_arg_best(b);
    bool match = false;
    if (label_cols > 1) {
      const L* l = labels + r * label_cols;
      ArgBest t{convert<float>(l[0]), 0};
      for (std::int64_t a = lane; a < label_cols; a += 32) t = arg_better(t, ArgBest{convert<float>(l[a]), a});
      t = warp_arg_best(t);
      match = b.i == t.i;
    } else {
      match = label_matches(b.i, labels[r], convert<float>(labels[r]), as_float);
    }
    if (lane == 0 && match) ++matches;
  }
  if (lane == 0) warp_matches[warp] = matches;
  __syncthreads();
  if (threadIdx.x != 0) return;
  std::int64_t total = 0;
  for (int w = 0; w < kRowsPerBlock; ++w) total += warp_matches[w];
  state[0] = static_cast<float>(total);
  state[1] = static_cast<float>(rows);
}

template <typename T>
__global__ void first_outside_kernel(const T* l, std::int64_t n, std::int64_t limit, unsigned long long* first) {
  LOCKSTEP_GRID_LOOP(i, n) {
    const std::int64_t v = label_index(l[i]);
    if (v < 0 || v >= limit) atomicMin(first, static_cast<unsigned long long>(i));  // min: order-free
  }
}

// The device's range check (mark_outside): one block finds the first index outside, thread 0
// writes the mark unless it is set, `set` last after a system fence (the host reads the mapped
// memory). One block: labels are a batch's, and the first index needs no atomics on host memory.
template <typename T>
__global__ void mark_outside_kernel(const T* l, std::int64_t n, std::int64_t limit, std::int64_t site,
                                    ErrorMark* mark) {
  __shared__ std::int64_t first[kThreads];
  __shared__ bool already;
  volatile ErrorMark* m = mark;
  if (threadIdx.x == 0) already = m->set != 0;  // read once: the host may clear it meanwhile
  __syncthreads();
  if (already) return;  // the block returns as one
  std::int64_t mine = n;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (!inside(label_index(l[i]), limit)) {
      mine = i;
      break;
    }
  first[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s && first[threadIdx.x + s] < first[threadIdx.x]) first[threadIdx.x] = first[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x != 0 || first[0] == n) return;
  m->index = first[0];
  m->value = static_cast<std::int64_t>(l[first[0]]);
  m->limit = limit;
  m->site = site;
  __threadfence_system();
  m->set = 1;
}

__global__ void differ_kernel(const unsigned char* a, const unsigned char* b, std::int64_t n, int* differ) {
  LOCKSTEP_GRID_LOOP(i, n) {
    if (a[i] != b[i]) *differ = 1;
  }
}

template <typename T>
T host_value(double value) {
  // What the CPU's fill stores: floats through float32, integers from the double.
  if constexpr (std::is_same_v<T, Float16>) return to_float16(static_cast<float>(value));
  else if constexpr (std::is_same_v<T, BFloat16>) return to_bfloat16(static_cast<float>(value));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(value);
  else {
    if (std::isnan(value)) return T{0};
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (value <= lo) return std::numeric_limits<T>::min();
    if (value >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(value);
  }
}

template <typename From, typename To>
void cast_to(ComputeContext& ctx, const From* src, void* dst, std::int64_t n) {
  cast_kernel<From, To><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(src, static_cast<To*>(dst), n);
  check_launch("cast");
}
}  // namespace

template <typename T>
void fill(ComputeContext& ctx, void* dst, std::int64_t n, double value) {
  if (n == 0) return;
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<T*>(dst), n, host_value<T>(value));
  check_launch("fill");
}

template <typename T>
void cast(ComputeContext& ctx, const void* srcv, DType to, void* dst, std::int64_t n) {
  if (n == 0) return;
  const T* src = static_cast<const T*>(srcv);
  visit_dtype(to, [&](auto to_type) { cast_to<T, typename decltype(to_type)::type>(ctx, src, dst, n); });
}

template <typename T>
void compare(ComputeContext& ctx, CompareOp op, const BroadcastDesc& d, const void* a, const void* b,
             std::uint8_t* out) {
  std::int64_t n = 0;
  const BcastKind kind = bcast_kind(d, &n);
  if (n == 0) return;
  compare_kernel<T><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(op, d, kind, static_cast<const T*>(a),
                                                                static_cast<const T*>(b), out, n);
  check_launch("compare");
}

template <typename T>
__global__ void transpose_kernel(TransposeDesc d, const T* src, T* dst, std::int64_t n) {
  LOCKSTEP_GRID_LOOP(o, n) {
    std::int64_t rest = o, s = 0;
    for (int i = d.rank - 1; i >= 0; --i) {
      s += rest % d.dims[i] * d.src_strides[i];
      rest /= d.dims[i];
    }
    dst[o] = src[s];
  }
}

template <typename T>
void transpose(ComputeContext& ctx, const TransposeDesc& d, const void* src, void* dst) {
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  if (n == 0) return;
  transpose_kernel<T><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(d, static_cast<const T*>(src), static_cast<T*>(dst), n);
  check_launch("transpose");
}

template <typename T>
void gather_rows(ComputeContext& ctx, const void* src, const std::int64_t* index, std::int64_t rows, std::int64_t row,
                 std::int64_t src_rows, void* dst) {
  if (rows * row == 0) return;
  gather_kernel<T><<<blocks_for(rows * row), kThreads, 0, stream(ctx)>>>(static_cast<const T*>(src), index, rows, row,
                                                                        src_rows, static_cast<T*>(dst));
  check_launch("gather_rows");
}

template <typename T>
void gather_rows_scaled(ComputeContext& ctx, const void* src, const std::int64_t* index, std::int64_t rows,
                        std::int64_t row, std::int64_t src_rows, float scale, float* dst) {
  if (rows * row == 0) return;
  gather_scaled_kernel<T><<<blocks_for(rows * row), kThreads, 0, stream(ctx)>>>(static_cast<const T*>(src), index, rows,
                                                                               row, src_rows, scale, dst);
  check_launch("gather_rows_scaled");
}

template <typename T>
void scatter_add_rows(ComputeContext& ctx, const void* src, const std::int64_t* index, std::int64_t rows,
                      std::int64_t row, std::int64_t dst_rows, void* dst) {
  if (rows * row == 0) return;
  scatter_add_kernel<T><<<blocks_for(row), kThreads, 0, stream(ctx)>>>(static_cast<const T*>(src), index, rows, row,
                                                                      dst_rows, static_cast<T*>(dst));
  check_launch("scatter_add_rows");
}

template <typename T>
void combine(ComputeContext& ctx, ReduceOp op, const void* const* in, int n_in, void* const* out, int n_out,
             std::int64_t begin, std::int64_t end) {
  if (end <= begin) return;
  LOCKSTEP_CHECK(n_in >= 1 && n_in <= kMaxCombine && n_out <= kMaxCombine, "combine on ", ctx.device().str(), ": ",
                 n_in, " inputs and ", n_out, " outputs; the CUDA kernel takes 1 to ", kMaxCombine, " of each");
  CombinePtrs p{};
  for (int j = 0; j < n_in; ++j) p.in[j] = in[j];
  for (int j = 0; j < n_out; ++j) p.out[j] = out[j];
  const unsigned g = blocks_for(end - begin);
  cudaStream_t s = stream(ctx);
  switch (op) {
    case ReduceOp::kSum: combine_kernel<ReduceOp::kSum, T><<<g, kThreads, 0, s>>>(p, n_in, n_out, begin, end); break;
    case ReduceOp::kMean: combine_kernel<ReduceOp::kMean, T><<<g, kThreads, 0, s>>>(p, n_in, n_out, begin, end); break;
    case ReduceOp::kMax: combine_kernel<ReduceOp::kMax, T><<<g, kThreads, 0, s>>>(p, n_in, n_out, begin, end); break;
    case ReduceOp::kMin: combine_kernel<ReduceOp::kMin, T><<<g, kThreads, 0, s>>>(p, n_in, n_out, begin, end); break;
  }
  check_launch("combine");
}

template <typename T>
void argmax(ComputeContext& ctx, const void* x, std::int64_t* arg, std::int64_t outer, std::int64_t axis,
            std::int64_t inner) {
  if (outer * inner == 0) return;
  argmax_kernel<T><<<row_blocks(outer * inner), kThreads, 0, stream(ctx)>>>(static_cast<const T*>(x), arg, outer, axis,
                                                                           inner);
  check_launch("argmax");
}

template <typename T>
void accuracy_state(ComputeContext& ctx, const void* predv, std::int64_t rows, std::int64_t cols, const void* labels,
                    DType label_dtype, std::int64_t label_cols, bool as_float, float* state) {
  const T* pred = static_cast<const T*>(predv);
  visit_dtype(label_dtype, [&](auto label_type) {  // one block: a batch's rows
    using L = typename decltype(label_type)::type;
    accuracy_state_kernel<T, L><<<1, kThreads, 0, stream(ctx)>>>(pred, rows, cols, static_cast<const L*>(labels),
                                                                 label_cols, as_float, state);
  });
  check_launch("accuracy_state");
}

template <typename T>
void cast_scaled(ComputeContext& ctx, const void* src, float scale, float* dst, std::int64_t n) {
  if (n == 0) return;
  cast_scaled_kernel<T><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<const T*>(src), scale, dst, n);
  check_launch("cast_scaled");
}

template <typename T>
std::int64_t first_outside(ComputeContext& ctx, const void* labels, std::int64_t n, std::int64_t limit) {
  if (n == 0) return -1;
  Scratch first(ctx, sizeof(unsigned long long));
  cudaStream_t s = stream(ctx);
  check(cudaMemsetAsync(first.as<void>(), 0xff, sizeof(unsigned long long), s), "cudaMemsetAsync");
  first_outside_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(labels), n, limit,
                                                            first.as<unsigned long long>());
  check_launch("first_outside");
  unsigned long long host = 0;
  read_back(ctx, &host, first.as<void>(), sizeof host);
  return host == ULLONG_MAX ? -1 : static_cast<std::int64_t>(host);
}

template <typename T>
void mark_outside(ComputeContext& ctx, const void* labels, std::int64_t n, std::int64_t limit, std::int64_t site,
                  ErrorMark* mark) {
  if (n == 0) return;
  mark_outside_kernel<T><<<1, kThreads, 0, stream(ctx)>>>(static_cast<const T*>(labels), n, limit, site, mark);
  check_launch("mark_outside");
}

bool equal_bytes_on(ComputeContext& ctx, const void* a, const void* b, std::size_t bytes) {
  Scratch differ(ctx, sizeof(int));
  cudaStream_t s = stream(ctx);
  check(cudaMemsetAsync(differ.as<void>(), 0, sizeof(int), s), "cudaMemsetAsync");
  const auto n = static_cast<std::int64_t>(bytes);
  differ_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const unsigned char*>(a),
                                                  static_cast<const unsigned char*>(b), n, differ.as<int>());
  check_launch("equal_bytes");
  int host = 0;
  read_back(ctx, &host, differ.as<void>(), sizeof host);
  return host == 0;
}

LOCKSTEP_INSTANTIATE_KERNEL(Any, fill)
LOCKSTEP_INSTANTIATE_KERNEL(Any, cast)
LOCKSTEP_INSTANTIATE_KERNEL(Any, compare)
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

}  // namespace lockstep::backend::cuda
