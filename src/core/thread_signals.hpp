#pragma once
// Which threads take the stop signals (SIGINT, SIGTERM, SIGHUP): never a thread of the library.
// oneDNN's JIT sgemm (2.6, Debian's) points its stack pointer at heap memory while it runs, and
// the kernel writes a signal handler's frame at the stack pointer of the thread it interrupts:
// a handler run on a computing thread corrupts the heap. So every thread the library starts
// blocks them (it inherits nothing else from its creator's mask), and a program that handles
// them does so on a thread that does not compute (training::StopSignalsRouted, which the CLI and
// the Python package's fit hold).
#include <signal.h>

namespace lockstep::detail {

/// SIGINT, SIGTERM and SIGHUP.
sigset_t stop_signal_set();
/// Blocks the stop signals on the calling thread; called first by every thread the library
/// starts (pools, replicas, input pipelines, collectives' progress, the MPI transport).
void block_stop_signals_on_this_thread();

}  // namespace lockstep::detail
