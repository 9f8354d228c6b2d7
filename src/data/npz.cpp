// .npz: a zip archive (PKWARE APPNOTE 6.3) of .npy members. The reader trusts the central
// directory, as unzip does, and reads each member from its local header.
#include "lockstep/data/npz.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "data/input_file.hpp"
#include "data/npy_format.hpp"
#include "lockstep/data/npy.hpp"

namespace lockstep::data {

namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr std::uint32_t kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr std::size_t kEndBytes = 22, kMaxComment = 65535;
// A corrupt size must not allocate gigabytes: a member inflates to at most this ratio of its
// compressed size (deflate's limit is about 1032:1).
constexpr std::uint64_t kMaxInflateRatio = 1032;

std::uint64_t le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A member as the central directory records it, with where its data starts.
struct Member {
  std::string name;
  std::uint64_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t csize = 0, usize = 0, local = 0, start = 0;
};

class Archive {
 public:
  explicit Archive(const std::string& path) : path_(path) {
    // A directory opens as a stream that fails on the first read; a FIFO or /dev/zero never ends.
    std::error_code ec;
    const auto type = std::filesystem::status(path, ec).type();
    if (type == std::filesystem::file_type::directory) throw IOError(prefix() + "is a directory, not an .npz file");
    if (!ec && type != std::filesystem::file_type::regular)
      throw IOError(prefix() + "is not a regular file (a device, FIFO or socket), so not an .npz file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IOError(prefix() + "cannot open: " + std::strerror(errno));
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
    if (in.bad()) throw IOError(prefix() + "read error");
  }

  // Every array, or those `wanted` names (nullptr: all).
  NpzSelection read(const std::set<std::string>* wanted) {
    const std::size_t end = find_end();
    std::uint64_t entries = le(at(end + 10, 2), 2);
    std::uint64_t dir_size = le(at(end + 12, 4), 4);
    std::uint64_t dir_offset = le(at(end + 16, 4), 4);
    if (entries == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
      // zip64: the locator sits just before the end record and points at the zip64 end record.
      if (end < 20 || le(at(end - 20, 4), 4) != kLocator64Sig) corrupt("a zip64 field without its locator");
      const std::uint64_t end64 = le(at(end - 20 + 8, 8), 8);
      if (le(at(end64, 4), 4) != kEnd64Sig) corrupt("bad zip64 end record");
      entries = le(at(end64 + 32, 8), 8);
      dir_size = le(at(end64 + 40, 8), 8);
      dir_offset = le(at(end64 + 48, 8), 8);
    }
    std::vector<Member> members;
    std::uint64_t p = dir_offset;
    for (std::uint64_t i = 0; i < entries; ++i) {
      if (le(at(p, 46), 4) != kCentralSig) corrupt("bad central directory entry " + std::to_string(i));
      const unsigned char* h = at(p, 46);
      Member m;
      const auto flags = le(h + 8, 2);
      m.method = le(h + 10, 2);
      m.crc = static_cast<std::uint32_t>(le(h + 16, 4));
      m.csize = le(h + 20, 4), m.usize = le(h + 24, 4), m.local = le(h + 42, 4);
      const auto name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
      m.name.assign(reinterpret_cast<const char*>(at(p + 46, name_len)), name_len);
      read_zip64_extra(at(p + 46 + name_len, extra_len), extra_len, m.usize, m.csize, m.local);
      p += 46 + name_len + extra_len + comment_len;
      if (m.name.empty() || m.name.back() == '/') continue;  // a folder
      if (flags & 1) corrupt("member '" + m.name + "' is encrypted");
      if (m.name.size() < 4 || m.name.compare(m.name.size() - 4, 4, ".npy") != 0) {
        corrupt("member '" + m.name + "' is not a .npy file");
      }
      const unsigned char* lh = at(m.local, 30);
      if (le(lh, 4) != kLocalSig) corrupt("bad local header of member '" + m.name + "'");
      m.start = m.local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
      at(m.start, m.csize);
      if (m.method == 8 && m.usize > m.csize * kMaxInflateRatio + 1024)
        corrupt("member '" + m.name + "' claims " + std::to_string(m.usize) + " bytes from " + std::to_string(m.csize) +
                " deflated ones, more than deflate can produce");
      members.push_back(std::move(m));
    }
    if (p > dir_offset + dir_size) corrupt("the central directory overruns its size");
    check_layout(members, dir_offset);
    // Inflated one at a time: each member's bytes are freed once parsed.
    NpzSelection out;
    for (const auto& m : members) {
      std::string array = m.name.substr(0, m.name.size() - 4);
      out.names.push_back(array);
      if (wanted != nullptr && wanted->count(array) == 0) continue;
      std::string data = member(m);
      detail::InputFile f(std::move(data), path_ + "' member '" + m.name, "read_npz");
      out.arrays.emplace(std::move(array), detail::read_npy_from(f));
    }
    return out;
  }

 private:
  std::string prefix() const { return "read_npz: '" + path_ + "': "; }
  [[noreturn]] void corrupt(const std::string& why) const {
    throw IOError(prefix() + "corrupt or truncated .npz (zip) archive: " + why);
  }
  const unsigned char* at(std::uint64_t offset, std::uint64_t n) const {
    if (offset > bytes_.size() || n > bytes_.size() - offset) {
      corrupt("needs bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ") but the file has " +
              std::to_string(bytes_.size()));
    }
    return reinterpret_cast<const unsigned char*>(bytes_.data()) + offset;
  }

  std::size_t find_end() const {
    if (bytes_.size() < kEndBytes) corrupt("too short for a zip (" + std::to_string(bytes_.size()) + " bytes)");
    const std::size_t lowest = bytes_.size() > kEndBytes + kMaxComment ? bytes_.size() - kEndBytes - kMaxComment : 0;
    for (std::size_t i = bytes_.size() - kEndBytes + 1; i-- > lowest;) {
      if (le(at(i, 4), 4) == kEndSig) return i;
    }
    if (bytes_.size() >= 4 && le(at(0, 4), 4) == kLocalSig) corrupt("no end of central directory (truncated?)");
    throw IOError(prefix() + "not an .npz file: no zip end record; is it a .npy or another format?");
  }

  // Values of 0xffffffff in the 32-bit fields live in the zip64 extra field (id 1), in order.
  void read_zip64_extra(const unsigned char* x, std::uint64_t n, std::uint64_t& usize, std::uint64_t& csize,
                        std::uint64_t& local) const {
    for (std::uint64_t i = 0; i + 4 <= n;) {
      const auto id = le(x + i, 2), len = le(x + i + 2, 2);
      if (i + 4 + len > n) corrupt("bad extra field");
      if (id == 1) {
        std::uint64_t q = i + 4;
        for (std::uint64_t* v : {&usize, &csize, &local}) {
          if (*v != 0xffffffff) continue;
          if (q + 8 > i + 4 + len) corrupt("short zip64 extra field");
          *v = le(x + q, 8);
          q += 8;
        }
      }
      i += 4 + len;
    }
  }

  // Members may not share bytes or run into the central directory: 40 entries over one deflated
  // member are how a 0.5 MB file asks for 20 GB. With that, what the archive inflates to is
  // bounded by its own size (kMaxInflateRatio x, plus a small allowance).
  void check_layout(std::vector<Member> ms, std::uint64_t dir_offset) const {
    std::stable_sort(ms.begin(), ms.end(), [](const Member& a, const Member& b) { return a.local < b.local; });
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const std::uint64_t end = ms[i].start + ms[i].csize;
      if (end > dir_offset)
        corrupt("member '" + ms[i].name + "' (bytes " + std::to_string(ms[i].local) + " to " + std::to_string(end) +
                ") runs into the central directory at byte " + std::to_string(dir_offset));
      if (i + 1 < ms.size() && end > ms[i + 1].local)
        corrupt("members '" + ms[i].name + "' (bytes " + std::to_string(ms[i].local) + " to " + std::to_string(end) +
                ") and '" + ms[i + 1].name + "' (from byte " + std::to_string(ms[i + 1].local) + ") overlap");
      total += ms[i].usize;
    }
    const std::uint64_t budget = bytes_.size() * kMaxInflateRatio + (1u << 20);
    if (total > budget)
      corrupt("its members claim " + std::to_string(total) + " bytes in all, more than an archive of " +
              std::to_string(bytes_.size()) + " bytes can hold (" + std::to_string(budget) + ")");
  }

  std::string member(const Member& m) const {
    const std::string& name = m.name;
    const auto method = m.method;
    const auto crc = m.crc;
    const auto csize = m.csize, usize = m.usize;
    const unsigned char* src = at(m.start, csize);
    std::string out;
    if (method == 0) {
      if (csize != usize) corrupt("stored member '" + name + "' has different sizes");
      out.assign(reinterpret_cast<const char*>(src), csize);
    } else if (method == 8) {
      out.resize(usize);
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) corrupt("zlib cannot start");
      z.next_in = const_cast<unsigned char*>(src);
      z.avail_in = static_cast<uInt>(csize);
      z.next_out = reinterpret_cast<unsigned char*>(out.data());
      z.avail_out = static_cast<uInt>(usize);
      const int rc = inflate(&z, Z_FINISH);
      const auto produced = z.total_out;
      inflateEnd(&z);
      if (rc != Z_STREAM_END || produced != usize) {
        corrupt("member '" + name + "': bad deflate data" + (z.msg ? std::string(" (") + z.msg + ")" : ""));
      }
    } else {
      corrupt("member '" + name + "' uses compression method " + std::to_string(method) +
              "; .npz members are stored (0) or deflated (8)");
    }
    const auto got = static_cast<std::uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
    if (got != crc) corrupt("member '" + name + "' fails its CRC check");
    return out;
  }

  std::string path_;
  std::string bytes_;
};

void put(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

std::map<std::string, Tensor> read_npz(const std::string& path) { return Archive(path).read(nullptr).arrays; }

NpzSelection read_npz(const std::string& path, const std::set<std::string>& wanted) {
  return Archive(path).read(&wanted);
}

void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, const NpzWriteOptions& options) {
  // Each member is made by write_npy into a scratch file, so that the .npy bytes are exactly
  // what read_npy reads.
  const std::string scratch = path + ".member.partial";
  std::string zip, central;
  std::uint64_t count = 0;
  for (const auto& [name, tensor] : arrays) {
    write_npy(scratch, tensor);
    std::string npy;
    {
      std::ifstream in(scratch, std::ios::binary);
      npy.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::remove(scratch.c_str());
    const auto crc = static_cast<std::uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(npy.data()), static_cast<uInt>(npy.size())));
    std::string body = npy;
    int method = 0;
    if (options.compress) {
      uLongf n = compressBound(static_cast<uLong>(npy.size()));
      std::string deflated(n, '\0');
      z_stream z{};
      deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
      z.next_in = reinterpret_cast<Bytef*>(npy.data());
      z.avail_in = static_cast<uInt>(npy.size());
      z.next_out = reinterpret_cast<Bytef*>(deflated.data());
      z.avail_out = static_cast<uInt>(deflated.size());
      deflate(&z, Z_FINISH);
      deflated.resize(z.total_out);
      deflateEnd(&z);
      body = std::move(deflated);
      method = 8;
    }
    LOCKSTEP_CHECK(npy.size() < 0xffffffffu && zip.size() < 0xffffffffu, "write_npz: '", path,
                   "': archives past 4 GiB (zip64) are not written; split the arrays");
    const std::string member = name + ".npy";
    const std::uint64_t offset = zip.size();
    put(zip, kLocalSig, 4); put(zip, 20, 2); put(zip, 0, 2); put(zip, method, 2); put(zip, 0, 4);
    put(zip, crc, 4); put(zip, body.size(), 4); put(zip, npy.size(), 4);
    put(zip, member.size(), 2); put(zip, 0, 2);
    zip += member + body;
    put(central, kCentralSig, 4); put(central, 20, 2); put(central, 20, 2); put(central, 0, 2);
    put(central, method, 2); put(central, 0, 4); put(central, crc, 4); put(central, body.size(), 4);
    put(central, npy.size(), 4); put(central, member.size(), 2); put(central, 0, 2); put(central, 0, 2);
    put(central, 0, 2); put(central, 0, 2); put(central, 0, 4); put(central, offset, 4);
    central += member;
    ++count;
  }
  const std::uint64_t dir_offset = zip.size();
  zip += central;
  put(zip, kEndSig, 4); put(zip, 0, 2); put(zip, 0, 2); put(zip, count, 2); put(zip, count, 2);
  put(zip, central.size(), 4); put(zip, dir_offset, 4); put(zip, 0, 2);

  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw IOError("write_npz: '" + path + "': cannot open '" + tmp + "': " + std::strerror(errno));
  bool ok = std::fwrite(zip.data(), 1, zip.size(), f) == zip.size();
  if (std::fclose(f) != 0) ok = false;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw IOError("write_npz: '" + path + "': write failed: " + why);
  }
}

}  // namespace lockstep::data
