// training::StopSignalsRouted, the one owner of "the stop signals reach a thread that only waits"
// (`lockstep train` holds one in main, the Python package's fit around the fit): a signal sent to
// the process runs its handler on that thread, never on one that computes (inside oneDNN's JIT
// GEMM kernels rsp points into the heap, and a signal frame pushed there corrupted it); its end
// puts back the calling thread's mask; a signal that is not a stop signal is a clear error.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "lockstep/core/error.hpp"
#include "lockstep/training/preemption.hpp"
#include "lockstep/training/stop_signals_routed.hpp"

namespace training = lockstep::training;

namespace {
bool blocked_here(int signal_number) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal_number) == 1;
}

std::atomic<pid_t> g_main_tid{0}, g_worker_tid{0};
std::atomic<int> g_handled{0}, g_on_computing{0};

extern "C" void count_handler_thread(int) {
  const pid_t t = gettid();
  if (t == g_main_tid.load() || t == g_worker_tid.load()) g_on_computing.fetch_add(1);
  g_handled.fetch_add(1);
}

// Without the routing the kernel picks the running main thread. Exits 0 when every handler ran
// elsewhere (run in a child: the test sends signals to its whole process).
[[noreturn]] void compute_while_signalled() {
  const training::StopSignalsRouted routed;
  g_main_tid = gettid();
  struct sigaction count {};
  count.sa_handler = count_handler_thread;
  sigemptyset(&count.sa_mask);
  sigaction(SIGHUP, &count, nullptr);
  std::atomic<bool> done{false};
  const auto compute = [&done] {
    volatile double x = 1.0;
    while (!done.load()) x = x * 1.0000001 + 1e-9;
  };
  std::thread worker([&compute] {
    g_worker_tid = gettid();
    compute();
  });
  std::thread sender([&done] {
    for (int i = 0; i < 200; ++i) {
      kill(getpid(), SIGHUP);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    done = true;
  });
  compute();
  sender.join();
  worker.join();
  std::_Exit(g_handled.load() > 0 && g_on_computing.load() == 0 ? 0 : 1);
}
}  // namespace

TEST(StopSignalsRouted, HandlersRunOnTheirOwnThreadNotOnComputingOnes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(compute_while_signalled(), testing::ExitedWithCode(0), "");
}

TEST(StopSignalsRouted, BlocksOnlyTheSignalsNamedWhileItLivesAndPutsTheMaskBack) {
  ASSERT_FALSE(blocked_here(SIGINT));
  ASSERT_FALSE(blocked_here(SIGTERM));
  {
    const training::StopSignalsRouted routed({SIGINT});
    EXPECT_TRUE(blocked_here(SIGINT));
    EXPECT_FALSE(blocked_here(SIGTERM));
  }
  EXPECT_FALSE(blocked_here(SIGINT));
  {
    const training::StopSignalsRouted routed;
    for (const int s : {SIGINT, SIGTERM, SIGHUP}) EXPECT_TRUE(blocked_here(s)) << s;
  }
  for (const int s : {SIGINT, SIGTERM, SIGHUP}) EXPECT_FALSE(blocked_here(s)) << s;
}

// A signal that arrives while it lives is handled (on its thread) before its end returns, and
// the request it makes is there after.
TEST(StopSignalsRouted, ASignalWhileItLivesReachesTheHandler) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction stop {};
        stop.sa_handler = [](int s) { training::request_stop(s); };
        sigemptyset(&stop.sa_mask);
        sigaction(SIGINT, &stop, nullptr);
        training::clear_stop_request();
        {
          const training::StopSignalsRouted routed({SIGINT});
          kill(getpid(), SIGINT);
          for (int i = 0; i < 2000 && !training::stop_requested(); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::_Exit(training::stop_reason() == SIGINT ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(StopSignalsRouted, ASignalThatIsNotAStopSignalIsAnError) {
  try {
    const training::StopSignalsRouted routed({SIGINT, SIGUSR1});
    FAIL() << "no error";
  } catch (const lockstep::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("signal " + std::to_string(SIGUSR1) + " is not a stop signal"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(blocked_here(SIGINT));  // nothing was left blocked
  EXPECT_THROW(training::StopSignalsRouted({0}), lockstep::ValueError);
  EXPECT_THROW(training::StopSignalsRouted({-3}), lockstep::ValueError);
}
