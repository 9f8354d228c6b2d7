#include "backend/plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "lockstep/core/error.hpp"

namespace lockstep::backend {

namespace {
// The file (program or shared library) this code was linked into.
std::filesystem::path this_object() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_search_paths), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  const auto p = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path(info.dli_fname) : p;
}

// A plugin's undefined references to lockstep resolve in the process's global scope. A program
// exports its symbols there (--export-dynamic, src/CMakeLists.txt); a shared library loaded
// RTLD_LOCAL (Python's extension module) is promoted to it here. The program itself cannot be
// dlopen'ed: its failure is expected and ignored.
void make_lockstep_global() {
  const std::filesystem::path self = this_object();
  if (self.empty()) return;
  if (void* h = dlopen(self.c_str(), RTLD_NOLOAD | RTLD_NOW | RTLD_GLOBAL)) (void)h;  // stays loaded: it is us
  else (void)dlerror();
}

void* load(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, void*> loaded;  // handles stay open: the plugin's code is in use
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = loaded.find(file); it != loaded.end()) return it->second;
  make_lockstep_global();
  std::string looked;
  for (const std::string& path : plugin_search_paths(file)) {
    const bool by_name = path.find('/') == std::string::npos;  // the dynamic loader's own search
    if (!by_name && !std::filesystem::exists(path)) {
      looked += (looked.empty() ? "" : ", ") + path;
      continue;
    }
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return loaded[file] = h;
    const char* why = dlerror();
    if (by_name)
      throw ValueError("lockstep's plugin " + file + " was not found (looked in " + looked +
                       ", then the dynamic loader's path: " + (why ? why : "?") +
                       "); reinstall lockstep, or set LD_LIBRARY_PATH to its folder");
    throw ValueError("lockstep's plugin " + path + " cannot be loaded: " + (why ? why : "unknown reason") +
                     "; reinstall lockstep (a plugin must come from the same build as the program)");
  }
  throw ValueError("lockstep's plugin " + file + " was not found (looked in " + looked + ")");
}
}  // namespace

std::vector<std::string> plugin_search_paths(const std::string& file) {
  std::vector<std::string> paths;
  const auto add = [&](const std::filesystem::path& dir) {
    if (dir.empty()) return;
    const std::string p = (dir / file).lexically_normal().string();
    for (const std::string& q : paths)
      if (q == p) return;
    paths.push_back(p);
  };
  const std::filesystem::path dir = this_object().parent_path();
  add(dir);
  if (!dir.empty()) {
    add(dir.parent_path() / "lib");
    add(dir.parent_path() / LOCKSTEP_INSTALL_LIBDIR);
  }
  add(LOCKSTEP_PLUGIN_BUILD_DIR);
  if (file.find('/') == std::string::npos) paths.push_back(file);
  return paths;
}

void* plugin_symbol(const std::string& file, const char* symbol) {
  void* handle = load(file);
  (void)dlerror();
  void* sym = dlsym(handle, symbol);
  if (sym == nullptr)
    throw ValueError("lockstep's plugin " + file + " has no " + symbol + " (a plugin of another lockstep build?)");
  return sym;
}

}  // namespace lockstep::backend
