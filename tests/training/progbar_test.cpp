// Progbar: Keras' line format and the non-interactive mode.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "lockstep/training/progbar.hpp"

namespace lockstep {
namespace {

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  return s;
}

TEST(Progbar, FinishedLineMatchesKeras) {
  Progbar bar(1000, stdout, /*interactive=*/0);
  // 3.2 s over 1000 steps: Keras prints "3s 3ms/step".
  EXPECT_EQ(bar.render(1000, {{"loss", 0.22104}, {"accuracy", 0.93451}}, 3.2),
            "1000/1000 [==============================] - 3s 3ms/step - loss: 0.2210 - accuracy: 0.9345");
}

TEST(Progbar, PartialBarHasAnArrowAndAnEta) {
  Progbar bar(1000, stdout, 0);
  const std::string line = bar.render(500, {{"loss", 0.5}}, 1.0);
  // Keras pads the count to the target's width; 15 of 30 cells filled, the last one '>'.
  EXPECT_EQ(line.rfind(" 500/1000 [==============>...............]", 0), 0u) << line;
  EXPECT_NE(line.find(" - ETA: "), std::string::npos) << line;
  EXPECT_NE(line.find(" - loss: 0.5000"), std::string::npos) << line;
  const std::string start = bar.render(0, {}, 0.0);
  EXPECT_EQ(start.rfind("   0/1000 [" + std::string(30, '.') + "]", 0), 0u) << start;
}

TEST(Progbar, SmallValuesUseScientificNotation) {
  Progbar bar(10, stdout, 0);
  const std::string line = bar.render(10, {{"loss", 5e-5}}, 1.0);
  EXPECT_NE(line.find("loss: 5.0000e-05"), std::string::npos) << line;
}

TEST(Progbar, NonInteractivePrintsOneLineAtTheEnd) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progbar bar(10, f, /*interactive=*/0);
    for (int i = 1; i < 10; ++i) bar.update(i, {{"loss", 1.0 / i}});
    EXPECT_EQ(read_all(f), "");
    std::fseek(f, 0, SEEK_END);
    bar.update(10, {{"loss", 0.1}});
  }
  const std::string out = read_all(f);
  std::fclose(f);
  EXPECT_EQ(out.rfind("10/10 [==============================]", 0), 0u) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
  EXPECT_NE(out.find("loss: 0.1000"), std::string::npos) << out;
}

// draws() is update()'s rule, which ProgbarLogger asks before it makes a batch's values.
TEST(Progbar, DrawsSaysWhetherUpdatePrints) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progbar quiet(10, f, /*interactive=*/0);
  EXPECT_FALSE(quiet.draws(5));
  EXPECT_TRUE(quiet.draws(10));
  EXPECT_TRUE(quiet.draws(5, /*finalize=*/true));
  Progbar unknown(-1, f, 0);
  EXPECT_FALSE(unknown.draws(1000));
  Progbar redraws(10, f, /*interactive=*/1);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // past the bar's 50 ms between redraws
  EXPECT_TRUE(redraws.draws(5));
  EXPECT_EQ(read_all(f), "");  // asking prints nothing
  std::fclose(f);
}

TEST(Progbar, RedrawPadsOverALongerLineWithSpaces) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progbar bar(10, f, /*interactive=*/1);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // past the bar's 50 ms between redraws
    bar.update(5, {{"loss", 5e-5}, {"accuracy", 5e-5}, {"auc", 5e-5}});
    bar.update(10, {});
  }
  const std::string out = read_all(f);
  std::fclose(f);
  // "\r<partial line>\r<final line, padded to the partial one's length>\n", no escape sequences:
  // Jupyter overwrites a line character by character after "\r", so the final line must cover it.
  ASSERT_EQ(out.front(), '\r') << out;
  const std::size_t second = out.find('\r', 1);
  ASSERT_NE(second, std::string::npos) << out;
  const std::string partial = out.substr(1, second - 1), final_line = out.substr(second + 1);
  EXPECT_EQ(out.find('\033'), std::string::npos) << out;
  EXPECT_EQ(final_line.rfind("10/10 [==============================]", 0), 0u) << out;
  ASSERT_EQ(final_line.back(), '\n') << out;
  EXPECT_EQ(final_line.size() - 1, partial.size()) << out;
}

// The bar shows what Keras' shows, losses and metrics (and val_ ones), and lockstep's input share,
// not the keys only logs carry (peak memory, steps per second, GPU utilisation, loss scaling:
// History, CSVLogger and TensorBoard have them).
TEST(ProgbarLogger, ShowsLossesMetricsAndInputShareNotLogsOnlyKeys) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgbarLogger logger(f);
  logger.set_params({.epochs = 1, .steps = 2, .verbose = 2});
  logger.on_epoch_begin(0, {});
  logger.on_train_batch_end(1, {{"loss", 0.5}});
  logger.on_epoch_end(0, {{"loss", 0.25},
                          {"accuracy", 0.75},
                          {"val_loss", 0.5},
                          {"input_wait_share", 0.04},
                          {"steps_per_second", 100.0},
                          {"peak_memory_mib", 12.0},
                          {"gpu_utilization", 87.0},
                          {"loss_scale", 32768.0},
                          {"skipped_steps", 3.0}});
  const std::string out = read_all(f);
  std::fclose(f);
  EXPECT_NE(out.find(" - loss: 0.2500 - accuracy: 0.7500 - val_loss: 0.5000 - input: 4%\n"), std::string::npos) << out;
  for (const char* key : {"peak_memory", "steps_per_second", "gpu_utilization", "loss_scale", "skipped_steps"})
    EXPECT_EQ(out.find(key), std::string::npos) << key << " on the bar: " << out;
}

}  // namespace
}  // namespace lockstep
