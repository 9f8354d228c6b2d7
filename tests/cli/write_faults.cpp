// The test build of the CLI (lockstep_test_hooks, tools/CMakeLists.txt) links this file: it
// gives write_file_atomic the faults that the CLI tests ask for through the environment. The
// shipped `lockstep` binary does not link it, so it cannot be crashed or failed this way.
//   LOCKSTEP_CRASH_AT_WRITE=N  the Nth atomic write of the process writes half of its temporary
//                              file, then SIGKILLs the process (a kill inside a checkpoint write)
//   LOCKSTEP_INJECT_ENOSPC=P   every atomic write to exactly P fails with ENOSPC (a full disk)
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

#include "core/env.hpp"
#include "io/fault_injection.hpp"

namespace {

int write_fault(const std::string& path, int fd, std::string_view bytes) {
  static const std::int64_t crash_at = lockstep::env::integer("LOCKSTEP_CRASH_AT_WRITE").value_or(0);
  static const std::string enospc_path = lockstep::env::text("LOCKSTEP_INJECT_ENOSPC");
  static std::atomic<std::int64_t> writes{0};
  const bool crash = crash_at > 0 && writes.fetch_add(1) + 1 == crash_at;
  if (!crash && (enospc_path.empty() || path != enospc_path)) return 0;
  (void)!::write(fd, bytes.data(), bytes.size() / 2);  // a torn temporary file, as either leaves
  if (crash) ::raise(SIGKILL);
  return ENOSPC;
}

const bool installed = [] {
  lockstep::io::detail::g_write_fault_hook = &write_fault;
  return true;
}();

}  // namespace
