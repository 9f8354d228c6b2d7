#pragma once
// Where tests make write_file_atomic fail as a real disk cannot be made to fail on demand (a
// full tmpfs needs mount privileges, which CI containers may not grant). The library only
// calls the hook; the faults themselves (a SIGKILL inside a write, ENOSPC for one path) are in
// tests/cli/write_faults.cpp, linked into the test build of the CLI alone, so the shipped
// library and binary have none.
#include <unistd.h>

#include <atomic>
#include <string>
#include <string_view>

namespace lockstep::io::detail {

/// Called by every write_file_atomic with its temporary file open and nothing written yet.
/// Returns 0 to write normally, or an errno to fail with (after leaving what it wrote, as a
/// failing disk would); it may also end the process.
using WriteFaultHook = int (*)(const std::string& path, int fd, std::string_view bytes);
inline std::atomic<WriteFaultHook> g_write_fault_hook{nullptr};

/// When non-zero, the next write_file_atomic fails at its write step with this errno, after
/// having created and partly written the temporary file; it then resets to zero.
inline std::atomic<int> g_inject_write_errno{0};

/// The errno a test asks this write to fail with, 0 for none.
inline int injected_write_error(const std::string& path, int fd, std::string_view bytes) {
  if (const WriteFaultHook hook = g_write_fault_hook.load())
    if (const int err = hook(path, fd, bytes)) return err;
  const int err = g_inject_write_errno.exchange(0);
  if (err != 0) (void)!::write(fd, bytes.data(), bytes.size() / 2);  // a partial temp file, as a full disk leaves
  return err;
}

}  // namespace lockstep::io::detail
