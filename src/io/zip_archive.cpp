#include "lockstep/io/zip_archive.hpp"

// next_in is const with ZLIB_CONST: the input is only read.
#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>

#include "lockstep/core/error.hpp"

namespace lockstep::io {

namespace {
constexpr std::uint32_t kLocalHeader = 0x04034b50;
constexpr std::uint32_t kCentralHeader = 0x02014b50;
constexpr std::uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr std::size_t kLocalHeaderSize = 30;
constexpr std::size_t kCentralHeaderSize = 46;
constexpr std::size_t kEndRecordSize = 22;
constexpr std::uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, the zip epoch
// Deflate cannot expand data by more than ~1032:1; a header claiming more is corrupt (or a bomb).
constexpr std::uint64_t kMaxDeflateRatio = 1032;

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw IOError("zip archive '" + source_ + "': " + what);
  }
  std::uint16_t u16(std::size_t at, const char* what) const {
    need(at, 2, what);
    return static_cast<std::uint16_t>(byte(at) | byte(at + 1) << 8);
  }
  std::uint32_t u32(std::size_t at, const char* what) const {
    need(at, 4, what);
    return static_cast<std::uint32_t>(byte(at)) | static_cast<std::uint32_t>(byte(at + 1)) << 8 |
           static_cast<std::uint32_t>(byte(at + 2)) << 16 | static_cast<std::uint32_t>(byte(at + 3)) << 24;
  }
  std::string_view span(std::size_t at, std::size_t n, const char* what) const {
    need(at, n, what);
    return bytes_.substr(at, n);
  }
  std::size_t size() const { return bytes_.size(); }

 private:
  void need(std::size_t at, std::size_t n, const char* what) const {
    if (at > bytes_.size() || n > bytes_.size() - at)
      fail(std::string("truncated: ") + what + " at byte " + std::to_string(at) + " runs past the end (" +
           std::to_string(bytes_.size()) + " bytes)");
  }
  unsigned byte(std::size_t at) const { return static_cast<unsigned char>(bytes_[at]); }
  std::string_view bytes_;
  const std::string& source_;
};

std::uint32_t crc32_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large entries in pieces.
  for (std::size_t at = 0; at < data.size();) {
    const std::size_t n = std::min<std::size_t>(data.size() - at, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string inflate_raw(std::string_view in, std::uint64_t out_size, const Reader& r, const std::string& name) {
  std::string out(out_size, '\0');
  z_stream s{};
  if (inflateInit2(&s, -MAX_WBITS) != Z_OK) r.fail("entry '" + name + "': zlib could not start inflating");
  s.next_in = reinterpret_cast<const Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&s, Z_FINISH);
  const std::uint64_t produced = s.total_out;
  inflateEnd(&s);
  if (rc != Z_STREAM_END || produced != out_size)
    r.fail("entry '" + name + "': its deflated data is corrupt or does not hold the " + std::to_string(out_size) +
           " bytes its header records");
  return out;
}

void put16(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}
}  // namespace

ZipArchive::ZipArchive(std::string_view bytes, std::string source) : bytes_(bytes), source_(std::move(source)) {
  read_directory();
}

void ZipArchive::fail(const std::string& what) const { throw IOError("zip archive '" + source_ + "': " + what); }

void ZipArchive::read_directory() {
  const Reader r(bytes_, source_);
  if (bytes_.size() < kEndRecordSize)
    fail("not a zip archive (" + std::to_string(bytes_.size()) + " bytes, shorter than a zip's end record)");
  // The end record is the last 22 bytes plus a comment of up to 65535: search backwards.
  std::size_t end = std::string_view::npos;
  const std::size_t lowest = bytes_.size() >= kEndRecordSize + 0xffff ? bytes_.size() - kEndRecordSize - 0xffff : 0;
  for (std::size_t at = bytes_.size() - kEndRecordSize + 1; at-- > lowest;) {
    if (r.u32(at, "end record") == kEndOfCentralDirectory &&
        at + kEndRecordSize + r.u16(at + 20, "comment length") == bytes_.size()) {
      end = at;
      break;
    }
  }
  if (end == std::string_view::npos) {
    if (bytes_.substr(0, 4) == std::string_view("PK\x03\x04", 4))
      fail("truncated: it starts as a zip archive but has no end-of-central-directory record at its end");
    fail("not a zip archive (no end-of-central-directory record at its end)");
  }
  const std::uint16_t disk = r.u16(end + 4, "end record");
  const std::uint16_t cd_disk = r.u16(end + 6, "end record");
  const std::uint16_t count = r.u16(end + 10, "end record");
  const std::uint32_t cd_size = r.u32(end + 12, "end record");
  const std::uint32_t cd_offset = r.u32(end + 16, "end record");
  if (disk != 0 || cd_disk != 0) fail("multi-disk archives are not supported");
  if (count == 0xffff || cd_offset == 0xffffffffu) fail("zip64 archives are not supported");
  if (static_cast<std::uint64_t>(cd_offset) + cd_size > end)
    fail("truncated or corrupt: the central directory (" + std::to_string(cd_size) + " bytes at " +
         std::to_string(cd_offset) + ") does not end before the end record at " + std::to_string(end));

  std::set<std::string> names;
  std::size_t at = cd_offset;
  for (std::uint16_t i = 0; i < count; ++i) {
    if (r.u32(at, "central directory entry") != kCentralHeader)
      fail("corrupt central directory: entry " + std::to_string(i) + " of " + std::to_string(count) +
           " has no signature at byte " + std::to_string(at));
    Member m;
    const std::uint16_t flags = r.u16(at + 8, "central directory entry");
    m.method = r.u16(at + 10, "central directory entry");
    m.crc = r.u32(at + 16, "central directory entry");
    m.packed = r.u32(at + 20, "central directory entry");
    m.size = r.u32(at + 24, "central directory entry");
    const std::uint16_t name_len = r.u16(at + 28, "central directory entry");
    const std::uint16_t extra_len = r.u16(at + 30, "central directory entry");
    const std::uint16_t comment_len = r.u16(at + 32, "central directory entry");
    m.local = r.u32(at + 42, "central directory entry");
    m.name = std::string(r.span(at + kCentralHeaderSize, name_len, "entry name"));
    at += kCentralHeaderSize + name_len + extra_len + comment_len;
    const std::string who = "entry '" + m.name + "'";
    if (flags & 1u) fail(who + " is encrypted, which is not supported");
    if (m.packed == 0xffffffffu || m.size == 0xffffffffu || m.local == 0xffffffffu)
      fail(who + " uses zip64, which is not supported");
    if (m.method != 0 && m.method != 8)
      fail(who + " uses compression method " + std::to_string(m.method) + " (supported: 0 stored, 8 deflated)");
    if (m.method == 0 && m.packed != m.size) fail(who + " is stored but its two sizes differ");
    if (m.size > static_cast<std::uint64_t>(m.packed) * kMaxDeflateRatio + 1024)
      fail(who + " claims " + std::to_string(m.size) + " bytes from " + std::to_string(m.packed) +
           " deflated ones, more than deflate can produce");
    if (!names.insert(m.name).second) fail("holds two entries named '" + m.name + "'");
    if (r.u32(m.local, "local header") != kLocalHeader)
      fail("corrupt: " + who + " has no local header at byte " + std::to_string(m.local));
    m.data_at = m.local + kLocalHeaderSize + r.u16(m.local + 26, "local header") + r.u16(m.local + 28, "local header");
    r.span(m.data_at, m.packed, ("the data of " + who).c_str());
    members_.push_back(std::move(m));
  }
  check_layout(cd_offset);
}

// Each entry's bytes (local header to the end of its data) must lie before the central directory
// and apart from every other's: entries sharing one deflated member are how a small archive asks
// for gigabytes. With that, the total it may inflate to is bounded by its own size.
void ZipArchive::check_layout(std::size_t cd_offset) const {
  std::vector<const Member*> order;
  for (const auto& m : members_) order.push_back(&m);
  std::stable_sort(order.begin(), order.end(), [](const Member* a, const Member* b) { return a->local < b->local; });
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Member& m = *order[i];
    const std::uint64_t end = static_cast<std::uint64_t>(m.data_at) + m.packed;
    if (end > cd_offset)
      fail("corrupt: entry '" + m.name + "' (bytes " + std::to_string(m.local) + " to " + std::to_string(end) +
           ") runs into the central directory at byte " + std::to_string(cd_offset));
    if (i + 1 < order.size() && end > order[i + 1]->local)
      fail("corrupt or crafted: entries '" + m.name + "' (bytes " + std::to_string(m.local) + " to " +
           std::to_string(end) + ") and '" + order[i + 1]->name + "' (from byte " + std::to_string(order[i + 1]->local) +
           ") overlap");
    total += m.size;
  }
  const std::uint64_t budget = static_cast<std::uint64_t>(bytes_.size()) * kMaxDeflateRatio + (1u << 20);
  if (total > budget)
    fail("its entries claim " + std::to_string(total) + " bytes in all, more than an archive of " +
         std::to_string(bytes_.size()) + " bytes can hold (" + std::to_string(budget) + ")");
}

const ZipArchive::Member& ZipArchive::member(const std::string& name) const {
  for (const auto& m : members_)
    if (m.name == name) return m;
  fail("has no entry '" + name + "'");
}

std::vector<std::string> ZipArchive::names() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(m.name);
  return out;
}

bool ZipArchive::contains(const std::string& name) const {
  return std::any_of(members_.begin(), members_.end(), [&](const Member& m) { return m.name == name; });
}

std::uint64_t ZipArchive::size_of(const std::string& name) const { return member(name).size; }

std::string ZipArchive::read(const std::string& name) const {
  const Member& m = member(name);
  const Reader r(bytes_, source_);
  const std::string_view data = bytes_.substr(m.data_at, m.packed);  // in range: checked when opened
  std::string content = m.method == 0 ? std::string(data) : inflate_raw(data, m.size, r, m.name);
  if (crc32_of(content) != m.crc) fail("entry '" + m.name + "' fails its CRC-32 check (the file is corrupt)");
  return content;
}

std::vector<ZipEntry> decode_zip(std::string_view bytes, const std::string& source) {
  const ZipArchive zip(bytes, source);
  std::vector<ZipEntry> entries;
  for (auto& name : zip.names()) {
    std::string content = zip.read(name);
    entries.push_back({std::move(name), std::move(content)});
  }
  return entries;
}

std::string encode_zip(const std::vector<ZipEntry>& entries) {
  std::string out;
  std::string directory;
  std::set<std::string> names;
  for (const auto& e : entries) {
    LOCKSTEP_CHECK(!e.name.empty() && e.name.size() < 0xffff, "encode_zip: an entry name must be 1 to 65534 bytes");
    LOCKSTEP_CHECK(names.insert(e.name).second, "encode_zip: two entries are named '", e.name, "'");
    LOCKSTEP_CHECK(e.bytes.size() < 0xffffffffu && out.size() < 0xffffffffu - e.bytes.size(),
                   "encode_zip: entry '", e.name, "' does not fit a zip without zip64 (4 GiB)");
    const auto crc = crc32_of(e.bytes);
    const auto offset = static_cast<std::uint32_t>(out.size());
    const auto size = static_cast<std::uint32_t>(e.bytes.size());
    const auto name_len = static_cast<std::uint32_t>(e.name.size());
    put32(out, kLocalHeader);
    put16(out, 20);  // version needed: 2.0
    put16(out, 0);   // flags
    put16(out, 0);   // stored
    put16(out, 0);   // time 00:00
    put16(out, kDosDate1980);
    put32(out, crc);
    put32(out, size);
    put32(out, size);
    put16(out, name_len);
    put16(out, 0);  // extra
    out += e.name;
    out += e.bytes;

    put32(directory, kCentralHeader);
    put16(directory, 3u << 8 | 20);  // made by: Unix, 2.0 (so the permission bits below count)
    put16(directory, 20);
    put16(directory, 0);
    put16(directory, 0);
    put16(directory, 0);
    put16(directory, kDosDate1980);
    put32(directory, crc);
    put32(directory, size);
    put32(directory, size);
    put16(directory, name_len);
    put16(directory, 0);  // extra
    put16(directory, 0);  // comment
    put16(directory, 0);  // disk
    put16(directory, 0);  // internal attributes
    put32(directory, 0100644u << 16);  // a regular file, rw-r--r--
    put32(directory, offset);
    directory += e.name;
  }
  LOCKSTEP_CHECK(entries.size() < 0xffff && out.size() + directory.size() < 0xffffffffu,
                 "encode_zip: the archive does not fit a zip without zip64");
  const auto cd_offset = static_cast<std::uint32_t>(out.size());
  out += directory;
  put32(out, kEndOfCentralDirectory);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put16(out, static_cast<std::uint32_t>(entries.size()));
  put32(out, static_cast<std::uint32_t>(directory.size()));
  put32(out, cd_offset);
  put16(out, 0);  // comment
  return out;
}

const ZipEntry* find_entry(const std::vector<ZipEntry>& entries, const std::string& name) {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace lockstep::io
