#include "backend/cpu/onednn.hpp"

#include <omp.h>

namespace lockstep::backend::cpu::onednn {

void single_threaded() {
  thread_local const bool pinned = (omp_set_num_threads(1), true);
  (void)pinned;
}

const dnnl::engine& engine() {
  // Never destroyed: pool threads (and their cached primitives, which use it) may outlive
  // every other static at exit.
  static const auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

}  // namespace lockstep::backend::cpu::onednn
