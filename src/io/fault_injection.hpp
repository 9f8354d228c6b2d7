#pragma once
// A test-only way to make write_file_atomic fail where a real disk cannot be made to fail
// on demand (a full tmpfs needs mount privileges, which CI containers may not grant).
#include <atomic>
#include <cstdlib>
#include <string>

namespace lockstep::io::detail {

/// When non-zero, the next write_file_atomic fails at its write step with this errno, after
/// having created and partly written the temporary file; it then resets to zero.
inline std::atomic<int> g_inject_write_errno{0};

/// CLI test hook: with LOCKSTEP_INJECT_ENOSPC=PATH in the environment, every write_file_atomic
/// to exactly PATH fails at its write step with ENOSPC, as a full disk would, so that a test can
/// check that a command reports it (a full filesystem cannot be made on demand in CI).
inline bool inject_enospc_for(const std::string& path) {
  static const std::string target = [] {
    const char* v = std::getenv("LOCKSTEP_INJECT_ENOSPC");
    return v ? std::string(v) : std::string();
  }();
  return !target.empty() && path == target;
}

/// Crash test hook: with LOCKSTEP_CRASH_AT_WRITE=N in the environment, the Nth atomic file
/// write of the process writes half of its temporary file and then SIGKILLs the process, so
/// that a test can kill training exactly inside a checkpoint write.
inline bool crash_now() {
  static const long target = [] {
    const char* v = std::getenv("LOCKSTEP_CRASH_AT_WRITE");
    return v ? std::atol(v) : 0L;
  }();
  static std::atomic<long> writes{0};
  return target > 0 && writes.fetch_add(1) + 1 == target;
}

}  // namespace lockstep::io::detail
