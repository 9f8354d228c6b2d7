#pragma once
// The one owner of "the stop signals reach a thread that only waits": a handler that calls
// request_stop (preemption.hpp) never runs on a thread that computes. oneDNN's JIT GEMM kernels
// point rsp at a heap buffer while they run (oneDNN issue 4845), and the kernel pushes a handler's
// frame at the interrupted thread's rsp: a handler run there corrupts the heap. `lockstep train`
// holds one for the whole run (tools/lockstep/main.cpp), the Python package around fit
// (python/src/interrupt.cpp); the library's own threads block these signals anyway.
#include <csignal>
#include <initializer_list>
#include <memory>

namespace lockstep::training {

/// While it lives, the stop signals it names (SIGINT, SIGTERM, SIGHUP, or some of them) reach one
/// thread of its own, which only waits. It blocks them on the thread that makes it, and so on every
/// thread that one starts after (threads inherit the mask), and starts a thread that leaves them
/// unblocked: the kernel delivers them to that thread alone. Where no thread can be started they
/// stay unblocked (delivered to any thread, as without it). Its end stops that thread and puts
/// back the mask found (a signal pending then reaches the thread that made it, at once): destroy
/// it on that thread. Make it before the threads it should cover start. A signal other than the
/// three is a ValueError.
class StopSignalsRouted {
 public:
  explicit StopSignalsRouted(std::initializer_list<int> signals = {SIGINT, SIGTERM, SIGHUP});
  ~StopSignalsRouted();
  StopSignalsRouted(const StopSignalsRouted&) = delete;
  StopSignalsRouted& operator=(const StopSignalsRouted&) = delete;

 private:
  struct Receiver;
  std::unique_ptr<Receiver> receiver_;  // null where no thread could be started
};

}  // namespace lockstep::training
