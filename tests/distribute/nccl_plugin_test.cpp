// The NCCL collectives are the plugin liblockstep_nccl.so (src/distribute/nccl_plugin): on any
// host, where built, it loads with every symbol bound; where not, kNccl refuses by name.
#include <gtest/gtest.h>

#include "backend/plugin.hpp"
#include "distribute/nccl_group.hpp"

namespace lockstep::distribute {
namespace {

TEST(NcclPlugin, LoadsWithEverySymbolBoundWhereBuilt) {
  if (!built_with_nccl()) GTEST_SKIP() << "built without NCCL: there is no plugin";
  EXPECT_NE(backend::plugin_symbol(kNcclPluginFile, kNcclPluginEntry), nullptr);
}

}  // namespace
}  // namespace lockstep::distribute
