#pragma once
// What emulated GPUs (LOCKSTEP_EMULATED_GPUS, registry.cpp) let a test check of the device
// ordering they cannot run: their fences pass at once, but each one is counted; and of their
// graphs (emulated_capture.hpp): how many were replayed, and with how many contexts' work; and
// where a test may end a capture while a lane records into it.
#include <cstdint>
#include <functional>

namespace lockstep::backend {

/// Fences recorded on emulated GPUs and not yet consumed (by wait_fence or copy_from_host_beside):
/// a fence that nobody waits for, or one consumed twice, shows here.
std::int64_t emulated_fences_pending();

/// Copies of host memory into staging blocks on emulated GPUs, as CUDA makes for a copy beside
/// the work from the caller's memory (none for a block the caller filled: staged_copy.hpp).
std::int64_t emulated_staging_copies();

/// Copies from the host to emulated GPUs beside their work (DeviceOps::copy_from_host_beside,
/// StagedCopyOps::copy_beside): what CUDA queues as one cudaMemcpyAsync and one event each.
std::int64_t emulated_copies_beside();

/// Waits for a context's queue on emulated GPUs (DeviceKindBackend::wait_for_queue), which have
/// nothing in flight: where the host must wait for a context's work (its error mark going back,
/// error_marks.hpp), each wait shows here.
std::int64_t emulated_queue_waits();

/// Graphs replayed on emulated GPUs since the process started, the contexts (lanes) those replays
/// ran the recorded work of, and that work (kernels, device copies and fills), each summed: a
/// graph of 4 logical replicas' step adds 1, 4 and every kernel of the 4 lanes.
struct EmulatedReplays {
  std::int64_t graphs = 0;
  std::int64_t lanes = 0;
  std::int64_t work = 0;
};
EmulatedReplays emulated_replays();

/// Tests: `hook` (empty: none) runs on a thread that found its context captured, before it
/// records a kernel, a device copy or a fill there; a test ends the capture meanwhile, as lane 0
/// ends it when its step fails while the other lanes still queue theirs.
void set_emulated_record_hook(std::function<void()> hook);

}  // namespace lockstep::backend
