// Which threads take the stop signals (thread_signals.hpp).
#include "core/thread_signals.hpp"

#include <pthread.h>

namespace lockstep::detail {

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void block_stop_signals_on_this_thread() {
  const sigset_t set = stop_signal_set();
  (void)pthread_sigmask(SIG_BLOCK, &set, nullptr);  // fails only for a bad argument
}

}  // namespace lockstep::detail
