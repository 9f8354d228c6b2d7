#pragma once
// What the oneDNN convolution and pooling kernels share: NHWC descriptors, the per-thread
// primitive cache and the split of a batch over a device's pool.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/context.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/onednn.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::cpu {

inline constexpr dnnl::memory::data_type kF32 = dnnl::memory::data_type::f32;

/// An NHWC activation, in oneDNN's logical (n, c, h, w) order.
inline dnnl::memory::desc nhwc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return dnnl::memory::desc({n, c, h, w}, kF32, dnnl::memory::format_tag::nhwc);
}

/// Primitives by shape, one cache per thread (a primitive's memory objects carry the data
/// handles of the call in progress). Past kMaxEntries shapes it starts over: a model has few.
template <typename Key, typename Entry>
class PrimitiveCache {
 public:
  template <typename Make>
  Entry& get(const Key& key, Make&& make) {
    auto it = entries_.find(key);
    if (it != entries_.end()) return *it->second;
    if (entries_.size() >= kMaxEntries) entries_.clear();
    return *entries_.emplace(key, make()).first->second;
  }

 private:
  static constexpr std::size_t kMaxEntries = 64;
  std::map<Key, std::unique_ptr<Entry>> entries_;
};

/// The batch in fixed parts, one per pool thread (one part when the work is too small to
/// split); part boundaries depend only on n and the number of parts.
class BatchParts {
 public:
  /// Below this many flops a kernel runs as one part: a pool wake-up would cost more.
  static constexpr double kMinParallelFlops = 1e6;
  BatchParts(ComputeContext& ctx, std::int64_t n, double flops)
      : n_(n),
        count_(ctx.threads() <= 1 || flops < kMinParallelFlops || n <= 1 ? 1
                                                                          : std::min<std::int64_t>(ctx.threads(), n)) {}
  /// The cost to pass for a memory-bound kernel (pooling, unpooling) that reads and writes
  /// `values` floats in all: it splits from the size an elementwise loop does (2 * kGrain
  /// values). Counted as flops, a convnet's second max pooling (128 x 11 x 11 x 64 values, 4 MB,
  /// under 1e6 compares) ran on one thread while the other waited.
  static double memory_bound(double values) { return values * (kMinParallelFlops / (2.0 * kGrain)); }
  std::int64_t count() const { return count_; }
  /// fn(part, first_row, end_row) for every part, in parallel; nothing for an empty batch.
  template <typename F>
  void run(ComputeContext& ctx, F&& fn) const {
    if (n_ == 0) return;
    onednn::single_threaded();
    if (count_ == 1) {
      fn(std::int64_t{0}, std::int64_t{0}, n_);
      return;
    }
    ctx.pool().parallel_for(count_, 1, [&](std::int64_t b, std::int64_t e) {
      onednn::single_threaded();
      for (std::int64_t p = b; p < e; ++p) fn(p, p * n_ / count_, (p + 1) * n_ / count_);
    });
  }

 private:
  std::int64_t n_, count_;
};

/// A kernel gradient (wn values) and a bias gradient (bn, 0 without one) summed over a batch's
/// parts: part 0 writes the result, every other part a partial sum of its own, which finish()
/// adds in part order, so a given pool size is bit-reproducible. Made on the calling thread
/// (the partial sums are that thread's buffer, reused across calls).
class PartSums {
 public:
  PartSums(const BatchParts& parts, std::int64_t wn, std::int64_t bn, void* dw, void* db)
      : count_(parts.count()), wn_(wn), bn_(bn), dw_(static_cast<float*>(dw)), db_(static_cast<float*>(db)),
        partial_(buffer()) {
    partial_.assign(static_cast<std::size_t>((count_ - 1) * (wn_ + bn_)), 0.0f);
  }
  float* weights(std::int64_t part) const { return part == 0 ? dw_ : partial_.data() + (part - 1) * (wn_ + bn_); }
  float* bias(std::int64_t part) const { return bn_ == 0 ? nullptr : part == 0 ? db_ : weights(part) + wn_; }
  void finish() const {
    for (std::int64_t p = 1; p < count_; ++p) {
      const float* src = weights(p);
      for (std::int64_t i = 0; i < wn_; ++i) dw_[i] += src[i];
      for (std::int64_t i = 0; i < bn_; ++i) db_[i] += src[wn_ + i];
    }
  }

 private:
  static std::vector<float>& buffer() {
    thread_local std::vector<float> b;
    return b;
  }
  std::int64_t count_, wn_, bn_;
  float *dw_, *db_;
  std::vector<float>& partial_;
};

/// LOCKSTEP_CONV_ALGORITHM=direct: every convolution on oneDNN's direct kernel (no Winograd,
/// no fused conv2d_max_pool2d), read once (conv.cpp).
bool direct_convolutions_only();

/// Runs fn, turning a oneDNN error into an InternalError naming the kernel.
template <typename F>
void guarded(const char* kernel, F&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    throw InternalError(std::string(kernel) + ": oneDNN failed: " + e.what() + " (status " +
                        std::to_string(static_cast<int>(e.status)) + ")");
  }
}

}  // namespace lockstep::backend::cpu
