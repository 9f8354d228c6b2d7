#include "interrupt.hpp"

#include <nanobind/nanobind.h>

#include <initializer_list>

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
  routed_.emplace(std::initializer_list<int>{SIGINT});
}

StopOnSigint::~StopOnSigint() {
  // A SIGINT still pending reaches this thread now, and the handler of fit's (a stop request the
  // next fit clears) takes it before Python's is put back.
  routed_.reset();
  if (installed_) sigaction(SIGINT, &previous_, nullptr);
}

}  // namespace lockstep::python
