#pragma once
// How much work a call did, for tests that bound it (a hostile file refused without reading it
// all, a deep graph loaded in linear time): the CPU seconds of the calling thread, which a loaded
// machine (a container build, CI running tests in parallel) does not inflate as it does wall time.
// Only for calls that do their work on the calling thread.
#include <time.h>

#include <functional>

namespace lockstep::test {

inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

inline double thread_cpu_seconds_of(const std::function<void()>& f) {
  const double start = thread_cpu_seconds();
  f();
  return thread_cpu_seconds() - start;
}

}  // namespace lockstep::test
