#pragma once
// What can be captured into a device graph and replayed (jit_compile), as the backend knows it.
#include <memory>

#include "backend/kernels.hpp"

namespace lockstep::backend {

/// Why a step that runs `op` cannot be captured into a device graph and replayed (jit_compile),
/// or null where it can: the one rule of which kernels a replay can repeat. A kernel that returns
/// its result to the host (the op list's return type is not void: sum_squares, first_outside)
/// makes the host wait and decide on the value each step. The step's own numbers are read from
/// the step's block in device memory (lockstep/core/step_state.hpp), so they replay right: the
/// optimizer updates' learning rate and bias corrections, and dropout's step where a call gives
/// its count (the dropout kernel's step_at, AttentionDesc::step_at); a call that drops with a host
/// step is refused by its op (detail::dropout_step_at), not here.
const char* kernel_capture_refusal(DeviceKind kind, KernelOp op);
/// Whether `op`'s result returns to the host (its op-list return type is not void): on a device
/// the host waits for it (counted as a host read, lockstep/tensor/host_reads.hpp).
bool kernel_returns_to_host(KernelOp op);

/// Captures the work queued on `ctx` between begin_capture and end_capture (on one thread) into
/// a graph, replayed by replay_graph on ctx's queue; work another thread queues on a captured
/// queue meanwhile (through ctx, or another context of the device sharing its queue) is refused
/// (ValueError), never recorded; only on a device kind whose capture_refusal is empty (else
/// ValueError naming the device and why). Another context of the device joins the capture by waiting for a fence recorded on `ctx` inside it (DeviceOps::record_fence, then
/// wait_fence: CUDA's fork of a capture into another stream), and must be joined back before it
/// ends: a fence recorded after its last work, waited for on `ctx`. end_capture(ctx, false)
/// discards the capture (the captured work failed) and returns null.
void begin_capture(ComputeContext& ctx);
std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep);
void replay_graph(ComputeContext& ctx, void* graph);

}  // namespace lockstep::backend
