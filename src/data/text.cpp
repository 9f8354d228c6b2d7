#include "lockstep/data/text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "lockstep/core/error.hpp"

namespace lockstep::data {

namespace {
// 256 MiB of text is 1 GiB of int32 ids twice over (inputs and targets): past a character model
// on a laptop; a larger file is refused by name rather than exhausting memory.
constexpr std::uintmax_t kMaxTextBytes = std::uintmax_t{256} << 20;

std::string describe(char32_t c) {
  char buf[32];
  if (c >= 0x20 && c < 0x7f) std::snprintf(buf, sizeof buf, "'%c' (U+%04X)", static_cast<char>(c), static_cast<unsigned>(c));
  else std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

std::string read_bytes(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  LOCKSTEP_CHECK_T(IOError, std::filesystem::exists(status), "text file '", path, "' does not exist");
  LOCKSTEP_CHECK_T(IOError, !std::filesystem::is_directory(status), "text file '", path, "' is a directory");
  std::ifstream in(path, std::ios::binary);
  LOCKSTEP_CHECK_T(IOError, in.good(), "cannot open text file '", path, "'");
  const auto size = std::filesystem::file_size(path, ec);
  LOCKSTEP_CHECK(ec || size <= kMaxTextBytes, "text file '", path, "' holds ", size, " bytes; lockstep reads at most ",
                 kMaxTextBytes, " bytes of text for a character model");
  // Stops past the bound: a device or a pipe (/dev/zero) has no size to check first.
  std::string bytes;
  if (!ec) bytes.reserve(static_cast<std::size_t>(size));
  std::vector<char> chunk(std::size_t{1} << 16);
  while (in && bytes.size() <= kMaxTextBytes) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    bytes.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  }
  LOCKSTEP_CHECK_T(IOError, !in.bad(), "error reading text file '", path, "'");
  LOCKSTEP_CHECK(bytes.size() <= kMaxTextBytes, "text file '", path, "' holds more than ", kMaxTextBytes,
                 " bytes; lockstep reads at most that much text for a character model");
  return bytes;
}

// Windows of `length` ids starting every `length` characters, with next-character targets.
void windows(const std::vector<std::int32_t>& ids, std::int64_t length, Tensor& x, Tensor& y) {
  const auto n = static_cast<std::int64_t>(ids.size() - 1) / length;
  std::vector<std::int32_t> xs(static_cast<std::size_t>(n * length)), ys(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    xs[i] = ids[i];
    ys[i] = ids[i + 1];
  }
  x = Tensor::from_vector(xs, Shape{n, length});
  y = Tensor::from_vector(ys, Shape{n, length});
}
}  // namespace

std::u32string decode_utf8(const std::string& bytes, const std::string& source) {
  std::u32string out;
  out.reserve(bytes.size());
  std::size_t i = bytes.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  const auto bad = [&](std::size_t at) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned char>(bytes[at]));
    throw ValueError(source + " is not UTF-8 text: byte " + buf + " at offset " + std::to_string(at) +
                     " does not start or continue a character");
  };
  while (i < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    LOCKSTEP_CHECK(b != 0, source, " is not text: it holds a NUL byte at offset ", i, " (a binary file?)");
    const int extra = b < 0x80 ? 0 : (b >> 5) == 0x6 ? 1 : (b >> 4) == 0xE ? 2 : (b >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || (extra > 0 && i + static_cast<std::size_t>(extra) >= bytes.size())) bad(i);
    char32_t c = extra == 0 ? b : b & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto cont = static_cast<unsigned char>(bytes[i + static_cast<std::size_t>(k)]);
      if ((cont >> 6) != 0x2) bad(i);
      c = (c << 6) | (cont & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
    static constexpr char32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (c < kSmallest[extra] || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) bad(i);
    out.push_back(c);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return out;
}

std::string encode_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

CharVocabulary CharVocabulary::of_text(const std::u32string& text) {
  CharVocabulary v;
  v.chars_ = text;
  std::sort(v.chars_.begin(), v.chars_.end());
  v.chars_.erase(std::unique(v.chars_.begin(), v.chars_.end()), v.chars_.end());
  return v;
}

CharVocabulary CharVocabulary::from_utf8(const std::string& characters, const std::string& source) {
  CharVocabulary v;
  v.chars_ = decode_utf8(characters, source);
  LOCKSTEP_CHECK(v.chars_.size() >= 2, source, ": a vocabulary needs at least 2 characters, got ", v.chars_.size());
  for (std::size_t i = 1; i < v.chars_.size(); ++i)
    LOCKSTEP_CHECK(v.chars_[i - 1] < v.chars_[i], source, ": the vocabulary's characters must be distinct and sorted, but ",
                   describe(v.chars_[i]), " follows ", describe(v.chars_[i - 1]));
  return v;
}

std::string CharVocabulary::utf8() const { return encode_utf8(chars_); }

std::vector<std::int32_t> CharVocabulary::encode(const std::u32string& text, const std::string& source) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto it = std::lower_bound(chars_.begin(), chars_.end(), text[i]);
    LOCKSTEP_CHECK(it != chars_.end() && *it == text[i], source, ": character ", describe(text[i]), " at position ", i,
                   " is not in the model's vocabulary of ", chars_.size(), " characters");
    ids[i] = static_cast<std::int32_t>(it - chars_.begin());
  }
  return ids;
}

std::string CharVocabulary::decode(const std::vector<std::int64_t>& ids) const {
  std::u32string text;
  text.reserve(ids.size());
  for (const std::int64_t id : ids) {
    LOCKSTEP_CHECK(id >= 0 && id < size(), "character id ", id, " is outside the vocabulary [0, ", size(), ")");
    text.push_back(chars_[static_cast<std::size_t>(id)]);
  }
  return encode_utf8(text);
}

CharText read_char_text(const std::vector<std::string>& paths, const CharTextOptions& o) {
  LOCKSTEP_CHECK(!paths.empty(), "read_char_text: no text file given");
  LOCKSTEP_CHECK(o.sequence_length >= 1 && o.sequence_length <= (1 << 20), "read_char_text: sequence_length must be in [1, 2^20], got ",
                 o.sequence_length);
  LOCKSTEP_CHECK(o.validation_split > 0 && o.validation_split < 1, "read_char_text: validation_split must be in (0, 1), got ",
                 o.validation_split);
  std::u32string text;
  for (const auto& path : paths) {
    const std::string bytes = read_bytes(path);
    LOCKSTEP_CHECK(!bytes.empty(), "text file '", path, "' is empty");
    text += decode_utf8(bytes, "text file '" + path + "'");
    LOCKSTEP_CHECK(text.size() <= kMaxTextBytes, "the text files hold more than ", kMaxTextBytes,
                   " characters; lockstep reads at most that much text for a character model");
  }
  const std::string source = paths.size() == 1 ? "text file '" + paths[0] + "'" : "the text files";
  const auto total = static_cast<std::int64_t>(text.size());
  const std::int64_t held_out = static_cast<std::int64_t>(std::floor(static_cast<double>(total) * o.validation_split));
  const std::int64_t need = o.sequence_length + 1;
  LOCKSTEP_CHECK(held_out >= need && total - held_out >= need, source, " holds ", total,
                 " characters: too few for a training window and a validation window (the last ",
                 o.validation_split * 100, "%) of sequence length + 1 = ", need,
                 " characters each; give a longer text or a shorter sequence length");
  CharText out;
  out.vocabulary = CharVocabulary::of_text(text);
  LOCKSTEP_CHECK(out.vocabulary.size() >= 2, source, " holds a single distinct character; a character model needs at least 2");
  const std::vector<std::int32_t> ids = out.vocabulary.encode(text, source);
  const auto split = ids.begin() + (total - held_out);
  windows(std::vector<std::int32_t>(ids.begin(), split), o.sequence_length, out.x_train, out.y_train);
  windows(std::vector<std::int32_t>(split, ids.end()), o.sequence_length, out.x_validation, out.y_validation);
  out.characters = total;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(out.vocabulary.size()), 0);
  for (const std::int32_t id : ids) ++counts[static_cast<std::size_t>(id)];
  for (const std::int64_t c : counts) {
    const double p = static_cast<double>(c) / static_cast<double>(total);
    out.unigram_entropy -= p * std::log(p);
  }
  return out;
}

}  // namespace lockstep::data
