#include "interrupt.hpp"

#include <nanobind/nanobind.h>

#include <system_error>

#include "lockstep/training/preemption.hpp"

namespace lockstep::python {

namespace {
extern "C" void request_stop_on_signal(int signal) { training::request_stop(signal); }

// Python handles signals on its main thread only; a fit started elsewhere leaves them alone.
bool on_python_main_thread() {
  namespace nb = nanobind;
  const nb::module_ threading = nb::module_::import_("threading");
  return threading.attr("main_thread")().attr("ident").equal(threading.attr("get_ident")());
}
}  // namespace

StopOnSigint::StopOnSigint() {
  training::clear_stop_request();
  if (!on_python_main_thread()) return;
  struct sigaction action {};
  action.sa_handler = &request_stop_on_signal;
  sigemptyset(&action.sa_mask);
  installed_ = sigaction(SIGINT, &action, &previous_) == 0;
  if (!installed_) return;
  sigset_t sigint;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  blocked_ = pthread_sigmask(SIG_BLOCK, &sigint, &previous_mask_) == 0;
  if (!blocked_) return;
  try {
    // It waits doing nothing, with SIGINT open: the kernel hands SIGINT to it (or to another
    // thread of the program's that does not block it), never to this one.
    receiver_ = std::thread([this, sigint] {
      (void)pthread_sigmask(SIG_UNBLOCK, &sigint, nullptr);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return done_; });
    });
  } catch (const std::system_error&) {  // no thread to spare: SIGINT comes to this thread, as before
    (void)pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
    blocked_ = false;
  }
}

StopOnSigint::~StopOnSigint() {
  if (receiver_.joinable()) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    receiver_.join();
  }
  // A SIGINT still pending reaches this thread now, and the handler of fit's (a stop request the
  // next fit clears) takes it before Python's is put back.
  if (blocked_) (void)pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  if (installed_) sigaction(SIGINT, &previous_, nullptr);
}

}  // namespace lockstep::python
