#pragma once
// Whole-file reads and crash-safe whole-file writes.
#include <string>
#include <string_view>

namespace lockstep::io {

/// Replaces `path` with `bytes` so that a reader (or a machine that loses power) sees either the
/// old file or the new one, never a mix: the bytes go to `path.tmp.<pid>` in the same directory,
/// which is fsynced, renamed over `path`, and then the directory is fsynced so the rename itself
/// is durable. On any failure (ENOSPC, EACCES, EROFS, ...) the temporary file is removed, the
/// previous `path` is left as it was, and IOError names the path, the step that failed and
/// strerror(errno). Not safe against two processes writing the same path at once (the last
/// rename wins, but each is whole).
/// check_output_path(path) comes first.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Checks, before any work whose result goes to `path`, that write_file_atomic can write it: its
/// directory exists and is writable, and `path` is absent or a regular file (never a device such
/// as /dev/full, a pipe or a directory, which the rename would replace). IOError "<what> '<path>'
/// cannot be written: <why>" (e.g. what = "--metrics-out").
void check_output_path(const std::string& path, const std::string& what);

/// Deletes, in `directory` itself (not below it), the temporary files
/// (<name>.lockstep-tmp.<pid>) that write_file_atomic left when its process was killed mid-write:
/// those whose pid is not a running process. With `old_names`, also <name>.tmp.<pid>, what
/// earlier versions wrote: only for directories no one but lockstep writes into. Symlinks are
/// neither followed nor removed; a live writer's temporary file is kept (PID reuse can only make
/// it keep too much). Returns how many were removed; unreadable entries are skipped.
int remove_stale_temporaries(const std::string& directory, bool old_names = false);

/// The whole content of `path`. IOError names the path when it is missing, unreadable, or not a
/// regular file (a FIFO, a device or a directory, which could be read forever).
std::string read_file(const std::string& path);

/// Creates `dir` and its parents if missing. IOError names the directory that could not be made.
void make_directories(const std::string& dir);

}  // namespace lockstep::io
