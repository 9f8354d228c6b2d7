#pragma once
// oneDNN on a device's pool. Every oneDNN call runs single-threaded on its calling thread
// (oneDNN's OpenMP team pinned to one thread per thread) and the device's ThreadPool splits
// the work, so exactly one pool computes per device and no second team fights for its cores.
#include <dnnl.hpp>

namespace lockstep::backend::cpu::onednn {

/// Pins oneDNN's OpenMP team to the calling thread; cheap after the first call on a thread.
void single_threaded();
/// The process's CPU engine.
const dnnl::engine& engine();
/// The calling thread's stream (a stream is not shared between threads).
dnnl::stream& stream();

}  // namespace lockstep::backend::cpu::onednn
