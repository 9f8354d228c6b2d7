// The thread that takes the stop signals while a StopSignalsRouted lives (stop_signals_routed.hpp).
#include <pthread.h>

#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/thread_signals.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/training/stop_signals_routed.hpp"

namespace lockstep::training {

struct StopSignalsRouted::Receiver {
  sigset_t signals{};
  sigset_t previous_mask{};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

StopSignalsRouted::StopSignalsRouted(std::initializer_list<int> signals) {
  const sigset_t stop_signals = detail::stop_signal_set();
  auto receiver = std::make_unique<Receiver>();
  sigemptyset(&receiver->signals);
  for (const int s : signals) {
    LOCKSTEP_CHECK(s > 0 && s < NSIG && sigismember(&stop_signals, s) == 1, "StopSignalsRouted: signal ", s,
                   " is not a stop signal (SIGINT, SIGTERM or SIGHUP)");
    sigaddset(&receiver->signals, s);
  }
  Receiver& r = *receiver;
  if (pthread_sigmask(SIG_BLOCK, &r.signals, &r.previous_mask) != 0) return;
  try {
    // It waits doing nothing with the signals open; a handler runs on it between its waits (the
    // wait resumes after), and a default action ends the process from it as from any thread.
    r.thread = std::thread([&r] {
      (void)pthread_sigmask(SIG_UNBLOCK, &r.signals, nullptr);
      std::unique_lock<std::mutex> lock(r.mu);
      r.cv.wait(lock, [&r] { return r.done; });
    });
  } catch (const std::system_error&) {  // no thread to spare: the signals come to any thread, as before
    (void)pthread_sigmask(SIG_SETMASK, &r.previous_mask, nullptr);
    return;
  }
  receiver_ = std::move(receiver);
}

StopSignalsRouted::~StopSignalsRouted() {
  if (!receiver_) return;
  Receiver& r = *receiver_;
  {
    const std::lock_guard<std::mutex> lock(r.mu);
    r.done = true;
  }
  r.cv.notify_one();
  r.thread.join();
  (void)pthread_sigmask(SIG_SETMASK, &r.previous_mask, nullptr);
}

}  // namespace lockstep::training
