#include "lockstep/io/tfrecord.hpp"

#include "lockstep/core/error.hpp"
#include "lockstep/io/crc32c.hpp"

namespace lockstep::io {

namespace {
void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(std::string_view s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}
}  // namespace

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc32c(crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, mask_crc32c(crc32c(data)), 4);
  return out;
}

std::vector<std::string> parse_tfrecords(std::string_view bytes, const std::string& source) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const auto where = [&] { return "'" + source + "': record " + std::to_string(out.size()) + " at byte " + std::to_string(at); };
    if (bytes.size() - at < 12) throw IOError("TFRecord file " + where() + " is cut short in its length header");
    const std::uint64_t n = get_le(bytes, at, 8);
    if (mask_crc32c(crc32c(bytes.data() + at, 8)) != get_le(bytes, at + 8, 4))
      throw IOError("TFRecord file " + where() + ": the length's CRC does not match (corrupt file)");
    if (n > bytes.size() - at - 12 || bytes.size() - at - 12 - n < 4)
      throw IOError("TFRecord file " + where() + " is cut short: it declares " + std::to_string(n) + " data bytes");
    const std::string_view data = bytes.substr(at + 12, n);
    if (mask_crc32c(crc32c(data)) != get_le(bytes, at + 12 + n, 4))
      throw IOError("TFRecord file " + where() + ": the data's CRC does not match (corrupt file)");
    out.emplace_back(data);
    at += 16 + n;
  }
  return out;
}

}  // namespace lockstep::io
