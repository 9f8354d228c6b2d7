#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

/// Element types. f16/bf16 are declared for mixed precision; kernels use f32, i32, i64, u8.
enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

std::size_t dtype_size(DType d);
const char* dtype_name(DType d);  // "float32", "int32", ... (numpy's names)

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::kU8; };
template <typename T> inline constexpr DType dtype_of_v = DTypeOf<T>::value;

}  // namespace lockstep
