#pragma once
// jit_compile's capturability check: whether a step's work could be captured into a device
// graph once and replayed. The check watches one eager step: every kernel its ops launch and
// every copy between the host and the device made on the watching threads. Which kernels a
// replay cannot repeat is the backend's one rule (backend::kernel_capture_refusal, read off the
// op list); which devices can capture at all is each device kind's row (capture_refusal).
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/core/device.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

class StepCaptureCheck {
 public:
  /// Watches the work of this thread for `check` while it lives (nothing when `check` is null);
  /// each replica thread of a step opens one.
  class OnThisThread {
   public:
    explicit OnThisThread(StepCaptureCheck* check);
    ~OnThisThread();
    OnThisThread(const OnThisThread&) = delete;
    OnThisThread& operator=(const OnThisThread&) = delete;

   private:
    StepCaptureCheck* previous_;
  };

  /// What the watched work did that a replay cannot repeat, each reason once in the order met,
  /// joined by "; ", naming the op and why ("the op 'SGD' (kernel sgd_update) takes the step's
  /// learning rate ..."); empty when every op can be captured.
  std::string blocker() const;
  /// Records `reason` unless it was recorded before (thread-safe: the replicas share a check).
  void block(std::string reason);

 private:
  mutable std::mutex mu_;
  std::vector<std::string> reasons_;
};

/// The check watching this thread, or null (the tensor layer's kernels and copies report to it).
StepCaptureCheck* current_step_capture_check();
/// Why steps on `device` cannot be captured; empty where they can.
std::string step_capture_refusal(const Device& device);

/// Work queued on one context, captured once into a device graph and replayed (jit_compile's
/// mechanism; PyTorch's torch.cuda.graph). The capture records the work without running it:
/// each replay() runs it, the first included. A replay reads and writes the memory the captured
/// work did, so every tensor that work reads or keeps must outlive the graph (its static inputs,
/// refilled in place between replays, and outputs). Run the work once eagerly first: the capture
/// may take device memory only from the caching allocator's cache, never from the device.
class StepGraph {
 public:
  /// Captures `work` run on this thread with `ctx` current. ValueError naming the device where
  /// step_capture_refusal is not empty; what `work` throws (an op that waits for the device
  /// fails inside a capture) is rethrown after the capture is discarded.
  StepGraph(ComputeContext& ctx, const std::function<void()>& work);
  /// Queues one run of the captured work on the context's queue.
  void replay();

  /// A static input for a graph: a copy of `t` in memory of its own that keeps what the tensor
  /// layer knows of `t` (labels the input path copied from the host are checked on the host).
  static Tensor static_input(const Tensor& t);
  /// Before a replay: runs on `t` the checks the captured work made of `input` that a replay
  /// cannot repeat (labels checked on the host: the same check and message as an eager step),
  /// then copies `t` into `input`. Nothing is copied where a check throws.
  void refill(Tensor& input, const Tensor& t) const;

  /// Called by an op inside a capture on this thread: `check` stands for what the op checked of
  /// `input` on the host, and is run on each tensor refill() copies into `input` (the op's check
  /// does not run again in a replay). False where no capture runs on this thread.
  static bool check_before_replay(const Tensor& input, std::function<void(const Tensor&)> check);

 private:
  struct InputCheck {
    const void* input;  // the static input's memory
    std::function<void(const Tensor&)> check;
  };
  ComputeContext* ctx_;
  std::shared_ptr<void> graph_;
  std::vector<InputCheck> input_checks_;
};

}  // namespace lockstep
