#pragma once
// Names that lockstep reads from its own files (a checkpoint pointer's "all", a record's
// "tensors_file") are joined to the directory that holds the file. An edited file must not be
// able to point outside it ("../../victim", "/etc/passwd"), so every such name goes through here.
#include <string>

namespace lockstep::io {

/// True when `name` is a plain file name: non-empty, not "." or "..", and without '/', '\\' or
/// NUL (so it is neither absolute nor able to climb out of its directory).
bool is_plain_file_name(const std::string& name);

/// `directory`/`name` after checking is_plain_file_name(name); otherwise IOError
/// "<source> names '<name>', which is not a file name inside '<directory>' ...".
std::string path_in_directory(const std::string& directory, const std::string& name, const std::string& source);

}  // namespace lockstep::io
