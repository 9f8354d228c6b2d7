#include "lockstep/data/npy.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "data/input_file.hpp"
#include "data/npy_format.hpp"

namespace lockstep::data {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
// numpy itself refuses headers past 10 kB unless told otherwise; a megabyte is generous and
// keeps a corrupt length from allocating gigabytes.
constexpr std::uint32_t kMaxHeaderLen = 1u << 20;
constexpr bool kLittleHost = std::endian::native == std::endian::little;

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// Parses the Python dict literal numpy writes: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }. Keys may come in any order; anything else is a parse failure.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const detail::InputFile& f) : s_(text), f_(f) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr") {
        if (peek('[')) fail("structured dtypes (a list as descr) are not supported");
        h.descr = string();
        seen_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        seen_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    if (!seen_descr || !seen_order || !seen_shape) fail("it lacks one of 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  // One line, the reason first: the header ends in a newline (and may hold anything), so it is
  // quoted with control characters escaped and cut to a readable length.
  [[noreturn]] void fail(const std::string& why) const {
    std::string shown;
    for (const char c : s_.substr(0, 200)) {
      if (c == '\n') shown += "\\n";
      else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) shown += "\\x" + hex_byte(c);
      else shown += c;
    }
    if (s_.size() > 200) shown += "...";
    throw IOError(f_.prefix() + "cannot parse the .npy header: " + why + " (header: \"" + shown + "\")");
  }
  static std::string hex_byte(char c) {
    const char* digits = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    return {digits[u >> 4], digits[u & 15]};
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool peek(char c) {
    skip_space();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "' at offset " + std::to_string(i_));
    ++i_;
  }
  std::string string() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a string at offset " + std::to_string(i_));
    const char quote = s_[i_++];
    const std::size_t end = s_.find(quote, i_);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const char* word : {"True", "False"}) {
      if (s_.compare(i_, std::strlen(word), word) == 0) {
        i_ += std::strlen(word);
        return word[0] == 'T';
      }
    }
    fail("expected True or False at offset " + std::to_string(i_));
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    while (!peek(')')) {
      if (!std::isdigit(static_cast<unsigned char>(s_[i_]))) fail("expected a dimension at offset " + std::to_string(i_));
      std::int64_t v = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (v > (std::int64_t{1} << 50)) fail("dimension too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2's long literals, in old files
      dims.push_back(v);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  const std::string& s_;
  const detail::InputFile& f_;
  std::size_t i_ = 0;
};

// How the file's dtype maps onto lockstep's.
struct Layout {
  DType dtype;              // of the tensor returned
  std::size_t file_size;    // bytes per element in the file
  bool swap = false;        // file byte order differs from the host's
  bool from_f64 = false;    // '<f8' converted to float32
};

Layout layout_of(const std::string& descr, const detail::InputFile& f) {
  auto unsupported = [&]() -> Layout {
    throw IOError(f.prefix() + "unsupported .npy dtype '" + descr +
                  "'; lockstep reads float32 (<f4), float64 (<f8, read as float32), float16 (<f2), int32 (<i4), "
                  "int64 (<i8), uint8 (|u1) and bool (|b1, read as uint8)");
  };
  if (descr.size() < 3) return unsupported();
  const char order = descr[0];
  const std::string kind = descr.substr(1);
  Layout l{};
  if (kind == "f4") l = {DType::kF32, 4};
  else if (kind == "f8") l = {DType::kF32, 8, false, true};
  else if (kind == "f2") l = {DType::kF16, 2};
  else if (kind == "i4") l = {DType::kI32, 4};
  else if (kind == "i8") l = {DType::kI64, 8};
  else if (kind == "u1" || kind == "b1") l = {DType::kU8, 1};
  else return unsupported();
  if (order == '|' || order == '=') return l;
  if (order != '<' && order != '>') return unsupported();
  l.swap = (order == '<') != kLittleHost;
  return l;
}

// A Fortran-order array of shape S is, byte for byte, a C-order array of shape reverse(S).
// This writes its transpose (reversing every axis order) into C order.
void reverse_axes(const Tensor& src, Tensor& dst) {
  const auto& out_dims = dst.shape().dims();
  const std::size_t rank = out_dims.size();
  const std::size_t es = dtype_size(dst.dtype());
  std::vector<std::int64_t> src_stride(rank, 1);  // stride in src of the output's axis j
  for (std::size_t j = 1; j < rank; ++j) src_stride[j] = src_stride[j - 1] * out_dims[j - 1];
  std::vector<std::int64_t> index(rank, 0);
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  std::int64_t offset = 0;
  for (std::int64_t n = 0, total = dst.numel(); n < total; ++n) {
    std::memcpy(out + n * es, in + offset * es, es);
    for (std::size_t j = rank; j-- > 0;) {  // odometer over the output's C order
      offset += src_stride[j];
      if (++index[j] < out_dims[j]) break;
      offset -= src_stride[j] * out_dims[j];
      index[j] = 0;
    }
  }
}

}  // namespace

namespace detail {

Tensor read_npy_from(InputFile& f) {
  unsigned char pre[10];
  f.read_exact(pre, 8, "the magic string and version");
  if (std::memcmp(pre, kMagic, kMagicLen) != 0) {
    throw IOError(f.prefix() + "not a .npy file: it does not start with the magic string \\x93NUMPY");
  }
  const int major = pre[6], minor = pre[7];
  std::uint32_t header_len = 0;
  std::uint64_t prelude = 0;
  if (major == 1) {
    f.read_exact(pre + 8, 2, "the header length");
    header_len = pre[8] | (std::uint32_t{pre[9]} << 8);
    prelude = 10;
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    f.read_exact(len, 4, "the header length");
    header_len = len[0] | (std::uint32_t{len[1]} << 8) | (std::uint32_t{len[2]} << 16) | (std::uint32_t{len[3]} << 24);
    prelude = 12;
  } else {
    throw IOError(f.prefix() + "unsupported .npy format version " + std::to_string(major) + "." +
                  std::to_string(minor) + "; lockstep reads 1.0, 2.0 and 3.0");
  }
  if (header_len > kMaxHeaderLen) {
    throw IOError(f.prefix() + "corrupt .npy header: it claims " + std::to_string(header_len) + " bytes");
  }
  std::string text(header_len, '\0');
  f.read_exact(text.data(), header_len, "the header");
  const Header h = HeaderParser(text, f).parse();
  const Layout l = layout_of(h.descr, f);

  Shape shape(h.shape);
  const std::string what = "array '" + h.descr + "'";
  f.check_data_fits(shape, l.file_size, prelude + header_len, what.c_str());
  // The bytes as stored: C order of the shape, or of the reversed shape for Fortran order.
  std::vector<std::int64_t> stored_dims = h.shape;
  if (h.fortran_order) std::reverse(stored_dims.begin(), stored_dims.end());
  const Shape stored_shape(stored_dims);
  Tensor stored = Tensor::empty(stored_shape, l.from_f64 ? DType::kI64 : l.dtype);  // kI64: 8-byte scratch
  const auto n = static_cast<std::size_t>(shape.numel());
  f.read_exact(stored.raw_data(), n * l.file_size, (what + " of shape " + shape.str()).c_str());
  f.expect_end("the " + what + " of shape " + shape.str());
  if (l.swap) detail::byteswap_elements(stored.raw_data(), n, l.file_size);
  if (l.from_f64) {
    Tensor f32 = Tensor::empty(stored_shape, DType::kF32);
    const auto* src = static_cast<const unsigned char*>(stored.raw_data());
    float* dst = f32.data<float>();
    for (std::size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<float>(v);
    }
    stored = f32;
  }
  if (h.fortran_order && shape.rank() > 1) {
    Tensor out = Tensor::empty(shape, l.dtype);
    reverse_axes(stored, out);
    return out;
  }
  return stored.reshape(shape);
}

}  // namespace detail

Tensor read_npy(const std::string& path) {
  detail::InputFile f(path, "read_npy");
  return detail::read_npy_from(f);
}

std::string encode_npy(const Tensor& tensor_anywhere, const std::string& what) {
  const Tensor tensor = tensor_anywhere.on_host();
  const char* descr = nullptr;
  switch (tensor.dtype()) {
    case DType::kF32: descr = kLittleHost ? "<f4" : ">f4"; break;
    case DType::kF16: descr = kLittleHost ? "<f2" : ">f2"; break;
    case DType::kI32: descr = kLittleHost ? "<i4" : ">i4"; break;
    case DType::kI64: descr = kLittleHost ? "<i8" : ">i8"; break;
    case DType::kU8: descr = "|u1"; break;
    case DType::kBF16:
      throw ValueError(what + ": bfloat16 has no numpy dtype; convert the tensor to float32 first");
  }
  std::string dims;
  for (std::size_t i = 0; i < tensor.rank(); ++i) dims += (i ? ", " : "") + std::to_string(tensor.shape().dims()[i]);
  if (tensor.rank() == 1) dims += ',';  // a Python 1-tuple
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad with spaces and a newline so that the data starts 64-byte aligned, as numpy does.
  const bool v2 = header.size() + 1 + 10 > 65535;
  const std::size_t prelude = v2 ? 12 : 10;
  header.append(63 - (prelude + header.size()) % 64, ' ');
  header += '\n';

  std::string bytes(kMagic, kMagicLen);
  bytes += static_cast<char>(v2 ? 2 : 1);
  bytes += '\0';
  const auto len = static_cast<std::uint32_t>(header.size());
  for (std::size_t b = 0; b < (v2 ? 4u : 2u); ++b) bytes += static_cast<char>((len >> (8 * b)) & 0xff);
  bytes += header;

  if (tensor.nbytes()) bytes.append(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
  return bytes;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  const std::string bytes = encode_npy(tensor, "write_npy: '" + path + "'");
  const std::string tmp = path + ".partial";
  const std::string prefix = "write_npy: '" + path + "': ";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (!file) throw IOError(prefix + "cannot open '" + tmp + "' for writing: " + std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  if (std::fclose(file) != 0) ok = false;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw IOError(prefix + "write failed: " + why);
  }
}

}  // namespace lockstep::data
