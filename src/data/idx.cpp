#include "lockstep/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "data/input_file.hpp"

namespace lockstep::data {

namespace {

constexpr unsigned char kCodeU8 = 0x08, kCodeI8 = 0x09, kCodeI16 = 0x0B, kCodeI32 = 0x0C, kCodeF32 = 0x0D,
                        kCodeF64 = 0x0E;

std::string hex(unsigned v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", width, v);
  return buf;
}

DType dtype_of_code(const detail::InputFile& f, unsigned char code) {
  switch (code) {
    case kCodeU8: return DType::kU8;
    case kCodeI32: return DType::kI32;
    case kCodeF32: return DType::kF32;
    case kCodeI8:
    case kCodeI16:
    case kCodeF64: {
      const char* name = code == kCodeI8 ? "int8" : code == kCodeI16 ? "int16" : "float64";
      throw IOError(f.prefix() + "IDX element type " + hex(code, 2) + " (" + name +
                    ") is not supported; lockstep reads uint8 (0x08), int32 (0x0C) and float32 (0x0D)");
    }
    default:
      throw IOError(f.prefix() + "not an IDX file: unknown element type code " + hex(code, 2) +
                    " in the magic number");
  }
}

unsigned char code_of_dtype(DType d) {
  switch (d) {
    case DType::kU8: return kCodeU8;
    case DType::kI32: return kCodeI32;
    case DType::kF32: return kCodeF32;
    default:
      throw ValueError(std::string("write_idx: dtype ") + dtype_name(d) +
                       " has no IDX element type; use uint8, int32 or float32");
  }
}

// IDX stores multi-byte elements big-endian.
constexpr bool kSwap = std::endian::native == std::endian::little;

}  // namespace

Tensor read_idx(const std::string& path) {
  detail::InputFile f(path, "read_idx");
  unsigned char magic[4];
  f.read_exact(magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    throw IOError(f.prefix() + "not an IDX file: magic number " + hex(detail::load_be32(magic), 8) +
                  " does not start with 0x0000 (MNIST images start with 0x00000803, labels with 0x00000801)");
  }
  const DType dtype = dtype_of_code(f, magic[2]);
  const unsigned rank = magic[3];
  if (rank == 0) throw IOError(f.prefix() + "IDX header declares rank 0; an IDX file has at least one dimension");

  std::vector<unsigned char> raw_dims(4 * rank);
  f.read_exact(raw_dims.data(), raw_dims.size(), "the dimensions");
  std::vector<std::int64_t> dims(rank);
  for (unsigned i = 0; i < rank; ++i) {
    dims[i] = static_cast<std::int32_t>(detail::load_be32(&raw_dims[4 * i]));
    if (dims[i] < 0) throw IOError(f.prefix() + "IDX header has negative dimension " + std::to_string(dims[i]));
  }
  const Shape shape(std::move(dims));

  const std::string what = std::string("IDX data of ") + dtype_name(dtype);
  f.check_data_fits(shape, dtype_size(dtype), 4 + 4 * std::uint64_t{rank}, what.c_str());
  Tensor t = Tensor::empty(shape, dtype);
  f.read_exact(t.raw_data(), t.nbytes(), (what + " of shape " + shape.str()).c_str());
  f.expect_end("the " + std::to_string(t.nbytes()) + " bytes of " + what + " of shape " + shape.str());
  if (kSwap && dtype_size(dtype) > 1) detail::byteswap_elements(t.raw_data(), t.nbytes() / 4, 4);
  return t;
}

void write_idx(const std::string& path, const Tensor& tensor_anywhere, const IdxWriteOptions& options) {
  const Tensor tensor = tensor_anywhere.on_host();
  const unsigned char code = code_of_dtype(tensor.dtype());
  LOCKSTEP_CHECK(tensor.rank() >= 1 && tensor.rank() <= 255, "write_idx: IDX holds ranks 1 to 255, not shape ",
                 tensor.shape().str());
  std::vector<unsigned char> bytes(4 + 4 * tensor.rank() + tensor.nbytes());
  bytes[2] = code;
  bytes[3] = static_cast<unsigned char>(tensor.rank());
  for (std::size_t i = 0; i < tensor.rank(); ++i) {
    const std::int64_t d = tensor.shape().dims()[i];
    LOCKSTEP_CHECK(d <= std::numeric_limits<std::int32_t>::max(), "write_idx: dimension ", d, " of shape ",
                   tensor.shape().str(), " does not fit IDX's int32");
    for (int b = 0; b < 4; ++b) bytes[4 + 4 * i + b] = static_cast<unsigned char>(d >> (24 - 8 * b));
  }
  unsigned char* data = bytes.data() + 4 + 4 * tensor.rank();
  if (tensor.nbytes()) std::memcpy(data, tensor.raw_data(), tensor.nbytes());
  if (kSwap && dtype_size(tensor.dtype()) > 1) detail::byteswap_elements(data, tensor.nbytes() / 4, 4);

  const std::string prefix = "write_idx: '" + path + "': ";
  if (options.gzip) {
    gzFile gz = gzopen(path.c_str(), "wb");
    if (!gz) throw IOError(prefix + "cannot open for writing: " + std::strerror(errno));
    std::size_t done = 0;
    bool ok = true;
    while (ok && done < bytes.size()) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30));
      ok = gzwrite(gz, bytes.data() + done, chunk) == static_cast<int>(chunk);
      done += chunk;
    }
    if (gzclose(gz) != Z_OK || !ok) throw IOError(prefix + "write failed");
  } else {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (!file) throw IOError(prefix + "cannot open for writing: " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
    if (std::fclose(file) != 0 || !ok) throw IOError(prefix + "write failed: " + std::strerror(errno));
  }
}

}  // namespace lockstep::data
