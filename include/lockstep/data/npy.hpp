#pragma once
// NumPy's .npy files (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
#include <string>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::data {

/// Reads a .npy file of format version 1.0, 2.0 or 3.0.
///
/// dtypes: '<f4' -> kF32, '<f2' -> kF16, '<i4' -> kI32, '<i8' -> kI64, '|u1' -> kU8,
/// '|b1' (bool) -> kU8 (0/1), and '<f8' -> kF32: lockstep has no float64, and numpy's default
/// dtype is float64, so refusing it would make most arrays users save unreadable; the values are
/// rounded to float32. Big-endian ('>') variants are byte-swapped. Fortran-order arrays are
/// transposed into C order. Bytes past the array are rejected, as read_idx does. Throws IOError naming the path for a missing or truncated file, a
/// bad magic, an unparsable header or an unsupported dtype (object arrays, structured dtypes,
/// complex, int8/int16/uint16+...).
Tensor read_npy(const std::string& path);

/// Writes `tensor` as a C-order .npy file (version 1.0, or 2.0 when the header needs it) with
/// dtype '<f4', '<f2', '<i4', '<i8' or '|u1'. bfloat16 has no numpy dtype: ValueError.
/// The file is written under a temporary name and renamed, so readers never see half a file.
void write_npy(const std::string& path, const Tensor& tensor);

/// The bytes write_npy writes, for a caller with its own writer (the CLI writes them with
/// io::write_file_atomic). `what` starts error messages.
std::string encode_npy(const Tensor& tensor, const std::string& what = "encode_npy");

}  // namespace lockstep::data
