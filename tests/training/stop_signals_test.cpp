// lockstep train's SIGTERM/SIGINT/SIGHUP handler (tools/lockstep/stop_signals.cpp, compiled in
// here: the CLI's objects are not a library): the first signal asks fit to stop and restores
// the three signals' default actions, so a second one ends the process at once; a signal
// ignored at start-up (nohup's SIGHUP) stays ignored, and the actions found come back after.
#include "../../tools/lockstep/stop_signals.cpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "lockstep/training/stop_signals_routed.hpp"

using lockstep::cli::StopSignals;
namespace training = lockstep::training;

namespace {
bool handler_is(int signal_number, void (*handler)(int)) {
  struct sigaction now {};
  sigaction(signal_number, nullptr, &now);
  return now.sa_handler == handler;
}
}  // namespace

TEST(StopSignals, FirstSignalRequestsAStopAndRestoresTheDefaults) {
  training::clear_stop_request();
  {
    StopSignals installed;
    EXPECT_FALSE(handler_is(SIGTERM, SIG_DFL));
    std::raise(SIGTERM);  // handled: the test goes on
    EXPECT_TRUE(training::stop_requested());
    EXPECT_EQ(training::stop_reason(), SIGTERM);
    for (const int s : {SIGTERM, SIGINT, SIGHUP}) EXPECT_TRUE(handler_is(s, SIG_DFL)) << s;
  }
  training::clear_stop_request();
}

TEST(StopSignals, SecondSignalEndsTheProcessAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopSignals installed;
        std::raise(SIGINT);
        if (!training::stop_requested()) std::_Exit(3);
        std::raise(SIGTERM);
        std::_Exit(0);
      },
      testing::KilledBySignal(SIGTERM), "");
}

TEST(StopSignals, IgnoredSignalsStayIgnoredAndPreviousActionsComeBack) {
  auto* previous_hup = std::signal(SIGHUP, SIG_IGN);
  {
    StopSignals installed;
    EXPECT_TRUE(handler_is(SIGHUP, SIG_IGN));
    EXPECT_FALSE(handler_is(SIGTERM, SIG_DFL));
  }
  EXPECT_TRUE(handler_is(SIGHUP, SIG_IGN));
  EXPECT_TRUE(handler_is(SIGTERM, SIG_DFL));
  std::signal(SIGHUP, previous_hup);
}

namespace {
// The CLI's set-up: the routing thread takes SIGTERM, runs the handler StopSignals installed
// on the main thread, asks fit to stop and restores the defaults. (Under ThreadSanitizer the
// handler's read of which signals were installed raced with their install: exit status 66.)
[[noreturn]] void stop_on_the_routed_thread() {
  const training::StopSignalsRouted routed;
  StopSignals installed;
  kill(getpid(), SIGTERM);
  // (The handler restores SIGHUP's default last.)
  for (int i = 0; i < 10000 && !(training::stop_requested() && handler_is(SIGHUP, SIG_DFL)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool ok = training::stop_reason() == SIGTERM && handler_is(SIGTERM, SIG_DFL) && handler_is(SIGINT, SIG_DFL) &&
                  handler_is(SIGHUP, SIG_DFL);
  std::exit(ok ? 0 : 1);  // (exit, not _Exit: a sanitizer's report makes the status its own)
}
}  // namespace

TEST(StopSignals, TheRoutedThreadRequestsTheStopAndRestoresTheDefaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(stop_on_the_routed_thread(), testing::ExitedWithCode(0), "");
}
