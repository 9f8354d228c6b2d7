#include "stop_signals.hpp"

#include <atomic>
#include <csignal>

#include "lockstep/training/preemption.hpp"

namespace lockstep::cli {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
// Which of kSignals the handler was installed for (written before it is), and what was there.
// Atomic, not volatile sig_atomic_t: the handler runs on the thread training::StopSignalsRouted
// starts, not the one that installs it (ThreadSanitizer reported the race).
std::atomic<int> g_installed[3] = {0, 0, 0};
static_assert(std::atomic<int>::is_always_lock_free);  // so the handler may read it
struct sigaction g_previous[3];

// Async-signal-safe only: lock-free atomics (request_stop, g_installed) and sigaction.
extern "C" void on_stop_signal(int signal_number) {
  training::request_stop(signal_number);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int i = 0; i < 3; ++i)
    if (g_installed[i].load() != 0) sigaction(kSignals[i], &dfl, nullptr);
}

}  // namespace

StopSignals::StopSignals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  // Restart interrupted system calls: the signal lands on any thread, and code that does not
  // expect EINTR (ours, oneDNN's, libhdf5's) must not see it for a request it never reads.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (const int s : kSignals) sigaddset(&action.sa_mask, s);  // one handler runs at a time
  for (int i = 0; i < 3; ++i) {
    if (sigaction(kSignals[i], nullptr, &g_previous[i]) != 0 || g_previous[i].sa_handler == SIG_IGN) continue;
    g_installed[i].store(1);
    sigaction(kSignals[i], &action, nullptr);
  }
  training::expect_stop_requests(true);  // several workers agree on the step to stop after
}

StopSignals::~StopSignals() {
  training::expect_stop_requests(false);
  for (int i = 0; i < 3; ++i) {
    if (g_installed[i].load() == 0) continue;
    // (After a first signal the handler already restored SIG_DFL: what was found is the same.)
    sigaction(kSignals[i], &g_previous[i], nullptr);
    g_installed[i].store(0);
  }
}

}  // namespace lockstep::cli
