// A user's program includes lockstep/lockstep.hpp alone (issue 42): the callbacks a fit() takes
// are declared through it. This file includes nothing else of lockstep, so it fails to compile
// when the umbrella header leaves one out.
#include "lockstep/lockstep.hpp"

#include <gtest/gtest.h>

TEST(UmbrellaHeader, DeclaresTheCallbacksAFitTakes) {
  using namespace lockstep;
  const std::vector<CallbackPtr> callbacks{
      std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.filepath = "ckpt"}),
      std::make_shared<TensorBoard>(TensorBoardOptions{.log_dir = "logs"}),
      std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{.backup_dir = "backup"}),
      std::make_shared<EarlyStopping>(EarlyStoppingOptions{}), std::make_shared<CSVLogger>(CSVLoggerOptions{.filename = "log.csv"})};
  EXPECT_EQ(callbacks.size(), 5u);
}
