#pragma once
// One process at a time in a run directory: two `lockstep train --logdir D` at once would
// overwrite each other's backups and model. flock(2) on D/lockstep.lock: the kernel releases it
// when the holder exits or dies, so a crashed run never leaves a stale lock behind (its pid may
// remain in the file; it is only read to name the holder of a live lock).
#include <string>

namespace lockstep::io {

class DirectoryLock {
 public:
  /// Takes the lock of `directory` (which must exist) without waiting, and writes this
  /// process's pid into the lock file. IOError "<what> '<directory>' is in use by process <pid>"
  /// when another holds it (another DirectoryLock in this process counts too).
  explicit DirectoryLock(const std::string& directory, const std::string& what = "run directory");
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  /// The lock file's name inside the directory.
  static constexpr const char* kFileName = "lockstep.lock";

 private:
  int fd_ = -1;
};

}  // namespace lockstep::io
