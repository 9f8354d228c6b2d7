// Plugins (src/backend/plugin.hpp): the CUDA backend is one, loaded only where a GPU is. Here
// (any host) the loader finds the built plugin, binds every symbol it needs, and names the file
// when one is missing or broken.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backend/cuda_loader.hpp"
#include "backend/plugin.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend {
namespace {

std::string error_of(const std::string& file, const char* symbol) {
  try {
    (void)plugin_symbol(file, symbol);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Plugin, TheCudaBackendLoadsAndAnswersWithoutAGpu) {
  if (!cuda_loader::built()) GTEST_SKIP() << "built without CUDA: there is no plugin";
  // What the registry does where a GPU is, done here on any host: dlopen with RTLD_NOW fails
  // if any reference of the plugin to lockstep or CUDA's libraries is left unbound.
  using Entry = const cuda::BackendApi* (*)();
  const auto entry = reinterpret_cast<Entry>(plugin_symbol(cuda::kPluginFile, cuda::kPluginEntry));
  const cuda::BackendApi* api = entry();
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->abi, cuda::BackendApi::kAbi);
  EXPECT_EQ(api->size, sizeof(cuda::BackendApi));
  EXPECT_EQ(api->device_count(), cuda_loader::gpu_count());  // the driver's answer and CUDA's agree
  EXPECT_NE(api->table(DType::kF32).gemm, nullptr);
}

TEST(Plugin, AMissingPluginIsNamedWithWhereItWasLooked) {
  const std::string err = error_of("liblockstep_no_such_plugin.so", "entry");
  EXPECT_TRUE(has(err, "liblockstep_no_such_plugin.so") && has(err, "not found")) << err;
  EXPECT_TRUE(has(err, "looked in")) << err;
}

TEST(Plugin, ABrokenPluginIsNamedWithTheLoadersReason) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "lockstep_plugin_test";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "liblockstep_broken.so").string();
  std::ofstream(file) << "not a shared library";
  const std::string err = error_of(file, "entry");
  EXPECT_TRUE(has(err, file) && has(err, "cannot be loaded")) << err;
  std::filesystem::remove_all(dir);
}

TEST(Plugin, APluginWithoutTheEntryPointIsNamed) {
  if (!cuda_loader::built()) GTEST_SKIP() << "built without CUDA: there is no plugin";
  const std::string err = error_of(cuda::kPluginFile, "lockstep_no_such_entry");
  EXPECT_TRUE(has(err, cuda::kPluginFile) && has(err, "lockstep_no_such_entry")) << err;
}

}  // namespace
}  // namespace lockstep::backend
