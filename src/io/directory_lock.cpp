#include "lockstep/io/directory_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lockstep/core/error.hpp"

namespace lockstep::io {

namespace {
std::string read_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  // The holder writes its pid just after taking the lock; it may not be there yet.
  return pid.empty() ? std::string("(pid not yet written)") : pid;
}
}  // namespace

DirectoryLock::DirectoryLock(const std::string& directory, const std::string& what) {
  const std::string path = (std::filesystem::path(directory) / kFileName).string();
  // Never through a symlink (a planted one made a run truncate a file outside the directory and
  // write its pid there), and O_NONBLOCK so that a FIFO planted as the lock cannot hang the open.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw IOError(::lockstep::detail::concat("cannot lock ", what, " '", directory, "': ",
                                             err == ELOOP ? "'" + path + "' is a symbolic link; lockstep makes that "
                                                            "file itself (remove the link)"
                                                          : "creating '" + path + "' failed: " + std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw IOError(::lockstep::detail::concat("cannot lock ", what, " '", directory, "': '", path,
                                             "' is not a regular file; lockstep makes that file itself (remove it)"));
  }
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? read_holder(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw IOError(::lockstep::detail::concat(what, " '", directory, "' is in use by process ", holder,
                                               " (", path, "); wait for it to finish or choose another directory"));
    throw IOError(::lockstep::detail::concat("cannot lock ", what, " '", directory, "': flock failed: ",
                                             std::strerror(err)));
  }
  // Truncated only now that the lock is held: the holder's pid stays readable to the loser.
  const std::string pid = std::to_string(::getpid()) + "\n";
  // Best effort: the pid only names the holder in the other process's message.
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace lockstep::io
