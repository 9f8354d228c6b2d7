#include "lockstep/io/file_name.hpp"

#include <filesystem>

#include "lockstep/core/error.hpp"

namespace lockstep::io {

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

std::string path_in_directory(const std::string& directory, const std::string& name, const std::string& source) {
  if (!is_plain_file_name(name)) {
    std::string shown;
    for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    throw IOError(source + " names '" + shown + "', which is not a file name inside '" + directory +
                  "' (no '/', '\\', '..' or absolute paths); the file was edited or is corrupt");
  }
  return (std::filesystem::path(directory) / name).string();
}

}  // namespace lockstep::io
