#pragma once
// Loading lockstep's optional parts that are shared libraries of their own (plugins: the CUDA
// backend, liblockstep_cuda.so), so that a process maps their dependencies (cuBLASLt, cuDNN,
// NCCL) only when it uses them.
#include <string>
#include <vector>

namespace lockstep::backend {

/// Where `file` is looked for, in order: beside the program or library this code is in, in its
/// ../lib (and the install's lib dir), in the build tree's plugin folder, then the dynamic
/// loader's own search (LD_LIBRARY_PATH, RUNPATH, ld.so.cache). A path is itself.
std::vector<std::string> plugin_search_paths(const std::string& file);

/// The address of `symbol` in plugin `file`, loaded once per process (RTLD_NOW: every symbol it
/// needs is bound at load). A plugin's references to lockstep bind to the lockstep that loads it.
/// Throws ValueError naming the file: not found (with the places looked in), not loadable
/// (with the loader's reason), or without the symbol.
void* plugin_symbol(const std::string& file, const char* symbol);

}  // namespace lockstep::backend
