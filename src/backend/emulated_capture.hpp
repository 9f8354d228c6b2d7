#pragma once
// Graph capture on emulated GPUs (LOCKSTEP_EMULATED_GPUS): what CUDA's stream capture does, on
// host memory with the CPU's kernels, so that CI tests everything of jit_compile but the CUDA
// calls. As in CUDA, a capture belongs to contexts (streams): while a context is being captured,
// the kernels and device copies queued on it are recorded (each a closure holding its arguments by
// value, descriptors and host arrays of pointers copied, and the CPU kernel) instead of run. Each
// lane records one thread's work (the one that began the capture, or joined the lane to it) through
// its one context; work another thread queues on it, or on another context of the device sharing
// the captured queue (stream 0 unless use_stream moved it, as CUDA's contexts of a GPU share its
// stream 0), is refused by name, as the CUDA backend refuses it, rather than recorded into the
// graph. Refused too, by name, though CUDA would record some of it: work the lane's own thread
// queues through a second context on its queue (CUDA records it, but that context's memory is not
// the graph's pool), and a CPU context's copy of GPU memory while any capture is under way (CUDA
// queues it on stream 0 of the GPU that holds the memory, refused or recorded when that GPU is
// captured; host memory does not say which GPU it is). Other contexts join a capture as CUDA's
// streams do: by waiting for a fence recorded inside it (a fork); the capturing context ends it once it waited for a fence
// each joined context recorded after its last work (a join). A replay runs every context's
// recording in an order its fences allow, the last context first, so that a fence the capture
// missed shows as a wrong result. What CUDA's capture would refuse fails here too, by name: a
// kernel that returns its result to the host, a copy between the host and the device, a byte
// comparison read on the host, a wait for work outside the capture, a context left unjoined.
// Lane 0 ends a capture whose step failed while the other lanes may still queue theirs: what a
// lane queues from then on runs at once, as outside a capture.
#include <cstdint>
#include <memory>

#include "backend/kernels.hpp"

namespace lockstep::backend::emulated {

/// The emulated GPUs' kernels of `dtype`: the CPU's, each recorded instead of run while its
/// context is being captured.
const KernelTable& kernels(DType dtype);
/// `base` (the emulated device's memory work and fences) with device copies, fills and fences
/// recorded likewise, and the host's copies refused while capturing.
DeviceOps capturing_ops(const DeviceOps& base);
/// Refuses (ValueError) a copy of `bytes` from the host to the device while `ctx` is being
/// captured, as capturing_ops' copies do: for copies outside DeviceOps (staged_copy.hpp).
void refuse_host_copy_in_capture(const ComputeContext& ctx, std::size_t bytes);

/// Whether `ctx` is a lane of a capture under way: its work is recorded, to run at replays.
bool recorded(const ComputeContext& ctx);

void begin_capture(ComputeContext& ctx);
std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep);
void replay(ComputeContext& ctx, void* graph);

}  // namespace lockstep::backend::emulated
