// Running a read of a hostile file in a forked child first: libhdf5 1.10 follows addresses in
// crafted files without checking them (SIGSEGV in H5F__accum_read, heap corruption), which no
// check of ours before it can rule out; a child that dies or stalls costs only the child.
#include "hdf5_child_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>

#include "lockstep/core/error.hpp"

namespace lockstep::io::h5 {
namespace {

// What the child says: nothing when `work` succeeded, else its error's message.
[[noreturn]] void run_child(int fd, const std::function<void()>& work) {
  int code = 0;
  std::string message;
  try {
    work();
  } catch (const std::exception& e) {
    message = e.what();
    code = 1;
  } catch (...) {
    message = "an unknown error";
    code = 1;
  }
  for (std::size_t done = 0; done < message.size();) {
    const ssize_t n = ::write(fd, message.data() + done, message.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::_exit(code);  // no atexit handlers, no flushing of the parent's buffers
}

// The child's message, read until it closes the pipe or the deadline passes (false then).
bool read_message(int fd, std::chrono::steady_clock::time_point deadline, std::string& out) {
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    if (out.size() < 65536) out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

void probe_in_child(const std::function<void()>& work, const std::string& source, std::chrono::seconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw IOError(source + ": cannot create a pipe to check it (" + std::strerror(errno) + ")");
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw IOError(source + ": cannot start a process to check it (" + std::strerror(err) + ")");
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(fds[1], work);
  }
  ::close(fds[1]);
  std::string message;
  const bool finished = read_message(fds[0], std::chrono::steady_clock::now() + timeout, message);
  ::close(fds[0]);
  if (!finished) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished)
    throw IOError(source + ": reading it took longer than " + std::to_string(timeout.count()) +
                  " s (corrupt or hostile HDF5 structure); stopped");
  if (WIFSIGNALED(status))
    throw IOError(source + ": corrupt: libhdf5 crashed reading it (signal " + std::to_string(WTERMSIG(status)) + ", " +
                  strsignal(WTERMSIG(status)) + ", in a separate process; nothing was loaded)");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  throw IOError(message.empty() ? source + ": cannot be read (the checking process exited with status " +
                                      std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")"
                                : message);
}

}  // namespace lockstep::io::h5
