// The CPU backend's kernel tables, one per dtype. What a row leaves out is unsupported for
// that dtype (supports() says so; ops raise a ValueError naming op, dtype and device).
#include "backend/cpu/conv_common.hpp"
#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
template <typename T>
constexpr KernelTable storage_table() {
  return KernelTable{
      .fill = fill<T>,
      .cast = cast<T>,
      .compare = compare<T>,
      .gather_rows = gather_rows<T>,
      .scatter_add_rows = scatter_add_rows<T>,
      .combine = combine<T>,
      .argmax = argmax<T>,
  };
}

// Floating dtypes: storage plus compute (float32 arithmetic inside).
template <typename F>
constexpr KernelTable floating_table() {
  KernelTable t = storage_table<F>();
  t.gemm = gemm<F>;
  t.unary = unary<F>;
  t.unary_backward = unary_backward<F>;
  t.binary = binary<F>;
  t.reduce_sum = reduce_sum<F>;
  t.reduce_max = reduce_max<F>;
  t.reduce_max_backward = reduce_max_backward<F>;
  t.softmax = softmax<F>;
  t.softmax_backward = softmax_backward<F>;
  t.bias_activation = bias_activation<F>;
  t.dropout_mask = dropout_mask<F>;
  t.sum_squares = sum_squares<F>;
  t.scale_clip = scale_clip<F>;
  return t;
}

constexpr KernelTable f32_table() {
  // Losses and optimizer updates stay float32 (master weights and the loss are float32
  // under mixed precision too); convolution and pooling are oneDNN's float32 primitives
  // (16-bit convolutions are not built yet: asking for one is a missing-kernel error).
  KernelTable t = floating_table<float>();
  t.sparse_softmax_xent = sparse_softmax_xent;
  t.sparse_softmax_xent_backward = sparse_softmax_xent_backward;
  t.one_hot = one_hot;
  t.sgd_update = sgd_update;
  t.adam_update = adam_update;
  t.sgd_update_summed = sgd_update_summed;
  t.adam_update_summed = adam_update_summed;
  t.conv2d = conv2d;
  t.conv2d_backward_data = conv2d_backward_data;
  t.conv2d_backward_weights = conv2d_backward_weights;
  t.pool2d = pool2d;
  t.pool2d_backward = pool2d_backward;
  t.batch_norm_reduce = batch_norm_reduce;
  t.batch_norm_apply = batch_norm_apply;
  t.batch_norm_backward = batch_norm_backward;
  return t;
}

template <typename I>
constexpr KernelTable integer_table() {
  KernelTable t = storage_table<I>();
  t.first_outside = first_outside<I>;
  t.cast_scaled = cast_scaled<I>;
  t.gather_rows_scaled = gather_rows_scaled<I>;
  return t;
}
}  // namespace

const KernelTable& table(DType dtype) {
  static const KernelTable f32 = [] {
    KernelTable t = f32_table();
#ifdef LOCKSTEP_CPU_CONV_MAX_POOL
    if (!direct_convolutions_only()) {  // LOCKSTEP_CONV_ALGORITHM=direct leaves the fused kernel out
      t.conv2d_max_pool2d = conv2d_max_pool2d;
      t.conv2d_max_pool2d_backward_weights = conv2d_max_pool2d_backward_weights;
      t.max_unpool2d = max_unpool2d;
    }
#endif
    return t;
  }();
  static const KernelTable f16 = floating_table<Float16>();
  static const KernelTable bf16 = floating_table<BFloat16>();
  static const KernelTable i32 = integer_table<std::int32_t>();
  static const KernelTable i64 = integer_table<std::int64_t>();
  static const KernelTable u8 = integer_table<std::uint8_t>();
  switch (dtype) {
    case DType::kF32: return f32;
    case DType::kF16: return f16;
    case DType::kBF16: return bf16;
    case DType::kI32: return i32;
    case DType::kI64: return i64;
    case DType::kU8: return u8;
  }
  return f32;
}

}  // namespace lockstep::backend::cpu
