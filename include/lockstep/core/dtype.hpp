#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/core/half.hpp"

namespace lockstep {

/// Element types. f16/bf16 are stored as 16 bits and computed in float32 (lockstep/core/half.hpp).
enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

std::size_t dtype_size(DType d);
const char* dtype_name(DType d);  // "float32", "int32", ... (numpy's names)
/// float32, float16 or bfloat16.
inline bool is_floating(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }
/// Every dtype, in enum order (for tables and tests that cover all of them).
inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8};
inline constexpr int kNumDTypes = 6;

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBF16; };
template <typename T> inline constexpr DType dtype_of_v = DTypeOf<T>::value;

}  // namespace lockstep
