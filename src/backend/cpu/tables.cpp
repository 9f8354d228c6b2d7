// The CPU backend's kernel tables: every op of the op list, for the dtypes its row names.
#include "backend/cpu/conv_common.hpp"
#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
struct CpuKernels : AllKernels {
  // The fused convolution + max pooling kernels are written for AVX-512 (conv_pool.cpp);
  // elsewhere the ops take the unfused path.
  static constexpr bool built([[maybe_unused]] KernelOp op) {
#ifdef LOCKSTEP_CPU_CONV_MAX_POOL
    return true;
#else
    return !fused_conv_pool(op);
#endif
  }
  // Convolutions in float32 only (oneDNN's f32 kernels): the ops widen 16-bit tensors.
  template <typename T>
  static constexpr bool built_as(KernelOp op) {
    return std::is_same_v<T, float> || !convolution(op);
  }
  // LOCKSTEP_CONV_ALGORITHM=direct leaves the fused kernel out.
  static bool enabled(KernelOp op) { return !fused_conv_pool(op) || !direct_convolutions_only(); }
};
}  // namespace

const KernelTable& table(DType dtype) { return table_of<CpuKernels>(dtype); }

}  // namespace lockstep::backend::cpu
