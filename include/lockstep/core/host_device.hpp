#pragma once
// LOCKSTEP_HOST_DEVICE: a function every backend compiles, the CUDA kernels included (__host__
// __device__ under nvcc, nothing under the host compiler). For rules that must give the same bits
// on every backend (dropout's keying) and for kernel bodies the CPU suite tests on the host.
#if defined(__CUDACC__)
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif
