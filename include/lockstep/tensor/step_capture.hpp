#pragma once
// jit_compile's capturability check: whether a step's work could be captured into a device
// graph once and replayed. The check watches one eager step: every kernel its ops launch and
// every copy between the host and the device made on the watching threads. Which kernels a
// replay cannot repeat is the backend's one rule (backend::kernel_capture_refusal, read off the
// op list); which devices can capture at all is each device kind's row (capture_refusal).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
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

/// Where the lanes of one graph captured from several contexts (StepGraph's lanes) meet on the
/// host, each lane on its own thread: exchange(lane, to) blocks until every lane called it, then
/// returns what each lane handed this one (from[i] = lane i's to[lane], null for nothing). The
/// device fences handed over order the lanes' queues; the meeting orders nothing on the device.
class LaneMeeting {
 public:
  /// A lane gives up waiting after `timeout`, or as soon as `peers_failed` returns true (a lane
  /// failed outside the meeting: the strategy's collectives failed) or a lane called abort.
  LaneMeeting(int lanes, std::chrono::milliseconds timeout, std::function<bool()> peers_failed = {});
  int lanes() const { return lanes_; }
  std::vector<void*> exchange(int lane, const std::vector<void*>& to);
  /// exchange, where the last lane to arrive runs `last(posted)` (posted[i]: what lane i handed
  /// over) before any lane returns; every lane passes the same function. What it throws aborts
  /// the meeting: every lane throws DistributedError naming it.
  using Last = std::function<void(const std::vector<std::vector<void*>>& posted)>;
  std::vector<void*> exchange(int lane, const std::vector<void*>& to, const Last& last);
  /// Lane `lane` failed with `why`: every lane waiting in exchange, now or later, throws
  /// DistributedError naming it.
  void abort(int lane, const std::string& why);
  /// Between steps (no lane inside): forgets an abort and a meeting a failed lane left half met.
  void reset();
  /// How many meetings every lane completed (tests: a replay costs one).
  std::uint64_t meetings() const { return meetings_.load(std::memory_order_relaxed); }

 private:
  [[noreturn]] void throw_aborted() const;
  const int lanes_;
  const std::chrono::milliseconds timeout_;
  const std::function<bool()> peers_failed_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::atomic<std::uint64_t> generation_{0};  // written under mu_; read without it while yielding
  std::atomic<std::uint64_t> meetings_{0};
  std::vector<std::vector<void*>> posted_[2];  // [generation % 2][lane]: what the lane handed over
  std::string aborted_;
};

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
  /// Lane `lane` of one graph captured from the work of meeting.lanes() contexts of one device,
  /// each queued by its own thread (logical replicas of one GPU, each on its own stream); every
  /// lane's thread constructs its lane at the same time. Lane 0 begins the capture on its context
  /// and hands each other lane a fence recorded inside it, whose wait joins that lane's context to
  /// the capture (CUDA's fork); each lane queues `work`, the fences between lanes there (their
  /// collectives') becoming edges of the graph; each other lane hands lane 0 a fence recorded
  /// after its work, which lane 0 waits for before it ends the capture (the join); they queue
  /// nothing more until it ended (their streams are in the capture until then). A lane that
  /// throws aborts the meeting, so that the others do not wait for it.
  StepGraph(ComputeContext& ctx, int lane, LaneMeeting& meeting, const std::function<void()>& work);
  /// Queues one run of the captured work on the context's queue. Lanes: every lane calls it after
  /// its refills, and they meet once (replay_lanes, every lane agreeing).
  void replay();
  /// Lanes, in one meeting: every lane calls it after queueing its refills of `graph` (its lane of
  /// the graph it would replay; null: none), handing over `token`. The last lane to arrive calls
  /// agree(every lane's token) (empty: agreed); where that holds and every lane named a graph, it
  /// launches lane 0's on lane 0's queue after every lane's refills (ordered by fences), makes
  /// every other lane's queue wait for it (a fence of lane 0's waited for on theirs before they
  /// return, so that none queues more before), and every lane returns true. Else nothing is
  /// queued and every lane returns false.
  static bool replay_lanes(LaneMeeting& meeting, int lane, ComputeContext& ctx, StepGraph* graph, const void* token,
                           const std::function<bool(const std::vector<const void*>& tokens)>& agree);
  /// Whether the calling thread is queueing work into a capture now (a StepGraph's work runs on
  /// it): its collectives then run on it, at once (a capture records the work of the threads that
  /// queue it, and its memory pool serves them).
  static bool capturing_here();

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
  StepGraph(ComputeContext& ctx, int lane, LaneMeeting* meeting, const std::function<void()>& work);
  /// Lanes: every lane hands what `to` holds to the others and gets theirs; a throw aborts the
  /// meeting.
  std::vector<void*> exchange(const std::vector<void*>& to);
  ComputeContext* ctx_;
  int lane_ = 0;
  LaneMeeting* meeting_ = nullptr;  // null: one context
  std::shared_ptr<void> graph_;     // lane 0's graph; another lane's keeps its memory pool
  std::vector<InputCheck> input_checks_;
  std::vector<std::uint32_t> launches_;  // the kernels captured, by KernelOp: each replay counts them
};

}  // namespace lockstep
