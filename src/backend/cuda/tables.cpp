// The CUDA backend's kernel tables: the op list's rows, as on the CPU (src/backend/cpu), except
// the kernels below that only the CPU has.
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_kernels.hpp"

namespace lockstep::backend::cuda {

namespace {
struct CudaKernels : AllKernels {
  // Not written for CUDA yet: the sharded update of replicas that share host memory (GPU
  // replicas reduce through NCCL) and the fused convolution + pooling.
  static constexpr bool built(KernelOp op) {
    return op != KernelOp::kSgdUpdateSummed && op != KernelOp::kAdamUpdateSummed && !fused_conv_pool(op);
  }
};
}  // namespace

const KernelTable& table(DType dtype) { return table_of<CudaKernels>(dtype); }

}  // namespace lockstep::backend::cuda
