#include "lockstep/io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/fault_injection.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::io {

namespace {
[[noreturn]] void fail(const std::string& path, const char* step, int err) {
  throw IOError(::lockstep::detail::concat("cannot write '", path, "': ", step, " failed: ", std::strerror(err)));
}

std::string parent_dir(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// A write's temporary file is <path>.lockstep-tmp.<pid>: the pid says whose it is, so that
// remove_stale_temporaries can tell a dead writer's leftovers from a live writer's file, and the
// infix says lockstep made it (".tmp.<pid>", the old infix, is a name anyone's files may have).
constexpr const char* kTempInfix = ".lockstep-tmp.";
constexpr const char* kOldTempInfix = ".tmp.";

// The pid of a temporary file's name with `infix`, or -1 when the name is not one.
long temp_owner(const std::string& name, const char* infix) {
  const auto at = name.rfind(infix);
  if (at == std::string::npos || at == 0) return -1;
  const std::string digits = name.substr(at + std::strlen(infix));
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

// Removes the temporary file when the write does not get as far as the rename.
struct TempGuard {
  std::string tmp;
  int fd = -1;
  bool armed = true;
  ~TempGuard() {
    if (fd >= 0) ::close(fd);
    if (armed) ::unlink(tmp.c_str());
  }
};
}  // namespace

void check_output_path(const std::string& path, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    return IOError(::lockstep::detail::concat(what, " '", path, "' cannot be written: ", why));
  };
  if (path.empty()) throw bad("the path is empty");
  const std::string dir = parent_dir(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw bad("its directory '" + dir + "': " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw bad("'" + dir + "' is not a directory");
  // The file is replaced by a rename: onto a device (/dev/full), a pipe (/dev/stdout) or a
  // directory that would replace the node itself, not write into it. Checked before the
  // directory's permission, so the message names that problem even where /dev is read-only
  // (containers).
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) throw bad("it exists and is not a regular file");
  if (::access(dir.c_str(), W_OK) != 0) throw bad("its directory '" + dir + "': " + std::strerror(errno));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  check_output_path(path, "file");
  TempGuard g{path + kTempInfix + std::to_string(::getpid())};
  g.fd = ::open(g.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (g.fd < 0) {
    g.armed = false;  // nothing was created
    fail(path, ("creating the temporary file '" + g.tmp + "'").c_str(), errno);
  }
  if (const int injected = detail::injected_write_error(path, g.fd, bytes); injected != 0)
    fail(path, "write", injected);
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(g.fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "write", errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(g.fd) != 0) fail(path, "fsync", errno);
  const int fd = g.fd;
  g.fd = -1;
  if (::close(fd) != 0) fail(path, "close", errno);
  if (::rename(g.tmp.c_str(), path.c_str()) != 0) fail(path, "rename", errno);
  g.armed = false;
  // Without this the rename may be lost on power failure even though the data was synced.
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    // Some filesystems refuse fsync on directories (EINVAL); the file itself is in place.
    if (rc != 0 && err != EINVAL) fail(path, ("fsync of directory '" + dir + "'").c_str(), err);
  }
}

int remove_stale_temporaries(const std::string& directory, bool old_names) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  // This directory only, not below it, and no symlink (the caller says which directories are
  // lockstep's: a sweep of the whole --logdir deleted a user's notes/draft.tmp.3999999).
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->symlink_status(ec).type() != fs::file_type::regular) continue;
    const std::string name = it->path().filename().string();
    long pid = temp_owner(name, kTempInfix);
    if (pid < 0 && old_names) pid = temp_owner(name, kOldTempInfix);
    if (pid <= 0 || pid == ::getpid()) continue;
    // ESRCH: no such process. EPERM means it exists (another user's): keep its file.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

std::string read_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; a FIFO, a device (/dev/zero) or a
  // directory is refused before anything is read, since reading it may never end.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IOError(::lockstep::detail::concat("cannot open '", path, "': ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IOError(::lockstep::detail::concat("cannot read '", path, "': ",
                                             S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file"));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IOError(::lockstep::detail::concat("cannot read '", path, "': ", std::strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

void make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IOError(::lockstep::detail::concat("cannot create directory '", dir, "': ", ec.message()));
  if (!std::filesystem::is_directory(dir, ec))
    throw IOError(::lockstep::detail::concat("cannot use '", dir, "' as a directory: it exists and is not one"));
}

}  // namespace lockstep::io
