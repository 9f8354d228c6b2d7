#pragma once
// A test-only way to make write_file_atomic fail where a real disk cannot be made to fail
// on demand (a full tmpfs needs mount privileges, which CI containers may not grant).
#include <atomic>

namespace lockstep::io::detail {

/// When non-zero, the next write_file_atomic fails at its write step with this errno, after
/// having created and partly written the temporary file; it then resets to zero.
inline std::atomic<int> g_inject_write_errno{0};

}  // namespace lockstep::io::detail
