#pragma once
// IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
// a big-endian magic 0x0000TTNN (TT the element type, NN the rank), NN big-endian int32
// dimensions, then the elements in row-major order, multi-byte elements big-endian.
#include <string>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::data {

/// Reads an IDX file, raw or gzip-compressed (told apart by the gzip magic bytes 1f 8b, not by
/// the file name). Element types: 0x08 uint8 -> kU8, 0x0C int32 -> kI32, 0x0D float32 -> kF32.
/// Throws IOError naming the path when the file is missing or unreadable, has a bad magic, an
/// unsupported element type, holds fewer bytes than its dimensions promise, or holds bytes past
/// them: trailing data is rejected, because in practice it means a header that lies about the
/// shape, and silently dropping data would hide that.
Tensor read_idx(const std::string& path);

struct IdxWriteOptions {
  bool gzip = false;  // compress with gzip (what MNIST's distribution files are)
};

/// Writes `tensor` (kU8, kI32 or kF32, rank 1..255) as an IDX file. Throws ValueError for other
/// dtypes or ranks and IOError naming the path when the file cannot be written.
void write_idx(const std::string& path, const Tensor& tensor, const IdxWriteOptions& options = {});

}  // namespace lockstep::data
