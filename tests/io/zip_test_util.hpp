#pragma once
// Hostile zip archives for the tests of the zip readers (.keras and .npz), built in memory:
// overlapping entries (many central-directory entries over one deflated member, the "zip bomb"
// that makes a 0.5 MB file ask for 20 GB), and a bounded-memory child process to load them in.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <functional>
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::ziptest {

inline std::uint32_t get32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}
inline std::uint32_t get16(const std::string& s, std::size_t at) {
  return static_cast<unsigned char>(s[at]) | static_cast<unsigned char>(s[at + 1]) << 8;
}
inline void set_le(std::string& s, std::size_t at, std::uint32_t v, int n) {
  for (int i = 0; i < n; ++i) s[at + i] = static_cast<char>(v >> (8 * i) & 0xff);
}
inline void put_le(std::string& s, std::uint32_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}

/// `zip` (no comment, no extra fields in its directory) with `copies` more central-directory
/// entries, each a copy of entry `which`'s under the name alias<i>.npy: all point at its data.
inline std::string with_aliases(const std::string& zip, int copies, std::size_t which = 0) {
  const std::size_t end = zip.size() - 22;
  const std::uint32_t count = get16(zip, end + 10), cd_offset = get32(zip, end + 16);
  std::string dir = zip.substr(cd_offset, end - cd_offset);
  std::size_t at = 0;
  for (std::size_t i = 0; i < which; ++i) at += 46 + get16(dir, at + 28) + get16(dir, at + 30) + get16(dir, at + 32);
  const std::string header = dir.substr(at, 46);
  for (int i = 0; i < copies; ++i) {
    std::string name = "alias" + std::to_string(i) + ".npy";
    std::string h = header;
    set_le(h, 28, static_cast<std::uint32_t>(name.size()), 2);
    set_le(h, 30, 0, 2);
    set_le(h, 32, 0, 2);
    dir += h + name;
  }
  std::string out = zip.substr(0, cd_offset) + dir;
  put_le(out, 0x06054b50, 4), put_le(out, 0, 2), put_le(out, 0, 2);
  put_le(out, count + copies, 2), put_le(out, count + copies, 2);
  put_le(out, static_cast<std::uint32_t>(dir.size()), 4), put_le(out, cd_offset, 4), put_le(out, 0, 2);
  return out;
}

/// A one-member .npz: "x.npy", a float32 vector of `n` zeros, deflated as it is made (a
/// 100 MB member packs to ~100 KB), without the test holding the whole member in memory.
inline std::string deflated_zeros_npz(std::uint64_t n) {
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  put_le(npy, static_cast<std::uint32_t>(dict.size()), 2);
  npy += dict;
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string packed;
  std::string chunk(1 << 20, '\0');
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(npy.data()), static_cast<uInt>(npy.size()));
  const auto feed = [&](const std::string& in, std::size_t len, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(len);
    do {
      char out[1 << 16];
      z.next_out = reinterpret_cast<Bytef*>(out);
      z.avail_out = sizeof out;
      deflate(&z, flush);
      packed.append(out, sizeof out - z.avail_out);
    } while (z.avail_out == 0);
  };
  feed(npy, npy.size(), Z_NO_FLUSH);
  for (std::uint64_t left = n * 4; left > 0;) {
    const std::size_t len = left < chunk.size() ? left : chunk.size();
    crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(len));
    left -= len;
    feed(chunk, len, left == 0 ? Z_FINISH : Z_NO_FLUSH);
  }
  deflateEnd(&z);
  const std::uint64_t size = npy.size() + n * 4;
  const std::string name = "x.npy";
  std::string zip;
  const auto header = [&](std::string& o, bool central) {
    put_le(o, central ? 0x02014b50 : 0x04034b50, 4);
    if (central) put_le(o, 20, 2);
    put_le(o, 20, 2), put_le(o, 0, 2), put_le(o, 8, 2), put_le(o, 0, 4);
    put_le(o, static_cast<std::uint32_t>(crc), 4), put_le(o, static_cast<std::uint32_t>(packed.size()), 4);
    put_le(o, static_cast<std::uint32_t>(size), 4), put_le(o, static_cast<std::uint32_t>(name.size()), 2);
    put_le(o, 0, 2);
    if (central) put_le(o, 0, 2), put_le(o, 0, 2), put_le(o, 0, 2), put_le(o, 0, 4), put_le(o, 0, 4);
    o += name;
  };
  header(zip, false);
  zip += packed;
  std::string dir;
  header(dir, true);
  const auto cd = static_cast<std::uint32_t>(zip.size());
  zip += dir;
  put_le(zip, 0x06054b50, 4), put_le(zip, 0, 2), put_le(zip, 0, 2), put_le(zip, 1, 2), put_le(zip, 1, 2);
  put_le(zip, static_cast<std::uint32_t>(dir.size()), 4), put_le(zip, cd, 4), put_le(zip, 0, 2);
  return zip;
}

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// Runs `load` in a child process whose address space is capped at `limit_bytes` (ASan needs
/// terabytes of shadow space, so sanitized builds run it unlimited). Returns "error: <message>"
/// when it throws a lockstep::Error, "loaded" when it returns, or what else happened ("out of
/// memory", "signal N").
inline std::string load_in_bounded_child(const std::function<void()>& load, std::uint64_t limit_bytes) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (!kSanitized) {
      const rlimit r{limit_bytes, limit_bytes};
      setrlimit(RLIMIT_AS, &r);
    }
    std::string result;
    try {
      load();
      result = "loaded";
    } catch (const lockstep::Error& e) {
      result = std::string("error: ") + e.what();
    } catch (const std::bad_alloc&) {
      result = "out of memory";
    } catch (const std::exception& e) {
      result = std::string("other exception: ") + e.what();
    }
    (void)!write(fds[1], result.data(), result.size());
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return got;
}

}  // namespace lockstep::ziptest
