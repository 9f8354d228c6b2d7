#pragma once
// visit_dtype: from a DType to its storage type in host code, where a kernel's caller picks the
// kernel's instance for a dtype known only at run time (DTypeOf goes the other way).
#include <cstdint>
#include <type_traits>

#include "lockstep/core/dtype.hpp"

namespace lockstep::backend {

/// f(std::type_identity<S>{}) for S the storage type of `dtype`; returns what f returns.
template <typename F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(std::type_identity<float>{});
    case DType::kF16: return f(std::type_identity<Float16>{});
    case DType::kBF16: return f(std::type_identity<BFloat16>{});
    case DType::kI32: return f(std::type_identity<std::int32_t>{});
    case DType::kI64: return f(std::type_identity<std::int64_t>{});
    case DType::kU8: break;
  }
  return f(std::type_identity<std::uint8_t>{});
}

}  // namespace lockstep::backend
