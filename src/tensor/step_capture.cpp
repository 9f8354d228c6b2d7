#include "lockstep/tensor/step_capture.hpp"

#include <algorithm>
#include <thread>

#include "backend/capture.hpp"
#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "backend/error_marks.hpp"
#include "backend/kernels.hpp"
#include "lockstep/core/error.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/kernel_launches.hpp"

namespace lockstep {

namespace {
thread_local StepCaptureCheck* t_check = nullptr;
}

StepCaptureCheck::OnThisThread::OnThisThread(StepCaptureCheck* check) : previous_(t_check) { t_check = check; }
StepCaptureCheck::OnThisThread::~OnThisThread() { t_check = previous_; }

std::string StepCaptureCheck::blocker() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& r : reasons_) out += (out.empty() ? "" : "; ") + r;
  return out;
}

void StepCaptureCheck::block(std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(reasons_.begin(), reasons_.end(), reason) == reasons_.end()) reasons_.push_back(std::move(reason));
}

StepCaptureCheck* current_step_capture_check() { return t_check; }

std::string step_capture_refusal(const Device& device) {
  const auto& kind = backend::device_kind(device.kind);
  if (!kind.available()) return "the backend of " + device.str() + " is not built";
  return kind.capture_refusal();
}

namespace {
// The graph's private pool of the context's memory, open while the graph is captured; the pool
// goes back to the cache unless kept (by the graph, until it is destroyed).
class GraphPool {
 public:
  explicit GraphPool(ComputeContext& ctx) : allocator_(ctx.allocator_ptr()), id_(allocator_->begin_graph_pool()) {}
  ~GraphPool() {
    if (open_) allocator_->end_graph_pool();
    if (allocator_) allocator_->release_graph_pool(id_);
  }
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;
  /// The capture is over: `graph` as a graph that gives the pool back after it is destroyed.
  std::shared_ptr<void> keep_with(std::shared_ptr<void> graph) {
    allocator_->end_graph_pool();
    open_ = false;
    void* raw = graph.get();
    return {raw, [graph = std::move(graph), allocator = std::move(allocator_), id = id_](void*) mutable {
              graph.reset();
              allocator->release_graph_pool(id);
            }};
  }

 private:
  std::shared_ptr<backend::Allocator> allocator_;
  std::uint64_t id_;
  bool open_ = true;
};
}  // namespace

namespace {
thread_local std::vector<std::pair<const void*, std::function<void(const Tensor&)>>>* t_input_checks = nullptr;
}  // namespace

namespace {
thread_local bool t_capturing = false;

class CapturingHere {
 public:
  CapturingHere() : previous_(t_capturing) { t_capturing = true; }
  ~CapturingHere() { t_capturing = previous_; }
  CapturingHere(const CapturingHere&) = delete;
  CapturingHere& operator=(const CapturingHere&) = delete;

 private:
  bool previous_;
};

const backend::DeviceOps& fence_ops(const ComputeContext& ctx) {
  const backend::DeviceOps& ops = backend::device_ops(ctx.device().kind);
  LOCKSTEP_CHECK(ops.record_fence && ops.wait_fence, "a graph of several lanes on ", ctx.device().str(),
                 ": the device has no fences to order its lanes");
  return ops;
}
}  // namespace

bool StepGraph::capturing_here() { return t_capturing; }

StepGraph::StepGraph(ComputeContext& ctx, const std::function<void()>& work) : StepGraph(ctx, 0, nullptr, work) {}

StepGraph::StepGraph(ComputeContext& ctx, int lane, LaneMeeting& meeting, const std::function<void()>& work)
    : StepGraph(ctx, lane, &meeting, work) {}

StepGraph::StepGraph(ComputeContext& ctx, int lane, LaneMeeting* meeting, const std::function<void()>& work)
    : ctx_(&ctx), lane_(lane), meeting_(meeting && meeting->lanes() > 1 ? meeting : nullptr) {
  const ComputeScope scope(ctx);
  GraphPool pool(ctx);
  std::vector<std::pair<const void*, std::function<void(const Tensor&)>>> checks;
  auto* const outer = t_input_checks;
  t_input_checks = &checks;
  const int lanes = meeting_ ? meeting_->lanes() : 1;
  bool begun = false;
  try {
    // The context's error mark (device range checks) exists before the capture: pinned memory
    // cannot be allocated by a thread that is capturing.
    if (ctx.device().kind != DeviceKind::kCpu) (void)backend::error_mark(ctx);
    if (lane == 0) {
      backend::begin_capture(ctx);
      begun = true;
    }
    if (meeting_) {  // the fork: each other lane's queue waits for a fence of the capture
      const backend::DeviceOps& ops = fence_ops(ctx);
      std::vector<void*> to(static_cast<std::size_t>(lanes), nullptr);
      for (int j = 1; lane == 0 && j < lanes; ++j) to[static_cast<std::size_t>(j)] = ops.record_fence(ctx, false);
      const std::vector<void*> from = exchange(to);
      if (lane > 0) ops.wait_fence(ctx, from[0]);
    }
    {
      const CapturingHere here;
      const detail::LaunchTally tally(launches_);
      work();
    }
    if (meeting_) {  // the join: lane 0 waits for a fence after each other lane's work
      const backend::DeviceOps& ops = fence_ops(ctx);
      std::vector<void*> to(static_cast<std::size_t>(lanes), nullptr);
      if (lane > 0) to[0] = ops.record_fence(ctx, false);
      const std::vector<void*> from = exchange(to);
      for (int j = 1; lane == 0 && j < lanes; ++j) ops.wait_fence(ctx, from[static_cast<std::size_t>(j)]);
    }
    std::shared_ptr<void> graph;
    if (lane == 0) {
      begun = false;
      graph = backend::end_capture(ctx, true);
      detail::note_step_capture(ctx.device());
    }
    // The other lanes' streams are in the capture until it ended: nothing more of theirs before.
    if (meeting_) (void)exchange(std::vector<void*>(static_cast<std::size_t>(lanes), nullptr));
    graph_ = pool.keep_with(std::move(graph));
  } catch (const std::exception& e) {
    t_input_checks = outer;
    if (meeting_) meeting_->abort(lane, e.what());
    if (begun) (void)backend::end_capture(ctx, false);
    throw;
  }
  t_input_checks = outer;
  for (auto& [input, check] : checks) input_checks_.push_back({input, std::move(check)});
}

std::vector<void*> StepGraph::exchange(const std::vector<void*>& to) {
  try {
    return meeting_->exchange(lane_, to);
  } catch (const std::exception& e) {
    meeting_->abort(lane_, e.what());
    throw;
  }
}

namespace {
// What each lane hands over at a replay's meeting (StepGraph::replay_lanes).
struct LaneReplay {
  ComputeContext* ctx;
  void* refilled;     // lanes > 0: a fence after this lane's refills
  bool ready;         // this lane refilled its lane of a graph
  void* graph;        // lane 0's: that graph, launched
  const void* token;  // for agree
  bool launched = false;
};
}  // namespace

void StepGraph::replay() {
  detail::note_replayed_launches(ctx_->device(), launches_);
  if (!meeting_) return backend::replay_graph(*ctx_, graph_.get());
  const bool launched = replay_lanes(*meeting_, lane_, *ctx_, this, nullptr, {});
  LOCKSTEP_CHECK(launched, "a graph's lanes: lane ", lane_, " replayed a graph another lane did not");
}

bool StepGraph::replay_lanes(LaneMeeting& meeting, int lane, ComputeContext& ctx, StepGraph* graph, const void* token,
                             const std::function<bool(const std::vector<const void*>&)>& agree) {
  const backend::DeviceOps& ops = fence_ops(ctx);
  const auto lanes = static_cast<std::size_t>(meeting.lanes());
  LaneReplay mine{&ctx, nullptr, graph != nullptr, graph ? graph->graph_.get() : nullptr, token};
  std::vector<void*> to(lanes, nullptr);
  to[0] = &mine;
  // Run by the last lane to arrive, while every lane waits inside the meeting: no lane queues
  // anything on its context meanwhile, so each one's later work is ordered after the graph.
  const LaneMeeting::Last launch = [&ops, lanes, &agree](const std::vector<std::vector<void*>>& posted) {
    std::vector<LaneReplay*> at(lanes);
    std::vector<const void*> tokens(lanes);
    bool every = true;
    for (std::size_t i = 0; i < lanes; ++i) {
      at[i] = static_cast<LaneReplay*>(posted[i][0]);
      tokens[i] = at[i]->token;
      every = every && at[i]->ready;
    }
    const bool go = every && (!agree || agree(tokens));
    ComputeContext& first = *at[0]->ctx;
    for (std::size_t j = 1; j < lanes; ++j) ops.wait_fence(go ? first : *at[j]->ctx, at[j]->refilled);
    if (!go) return;
    backend::replay_graph(first, at[0]->graph);
    for (std::size_t j = 1; j < lanes; ++j) ops.wait_fence(*at[j]->ctx, ops.record_fence(first, false));
    for (LaneReplay* l : at) l->launched = true;
  };
  try {
    if (lane > 0) mine.refilled = ops.record_fence(ctx, false);
    (void)meeting.exchange(lane, to, launch);
  } catch (const std::exception& e) {
    meeting.abort(lane, e.what());
    throw;
  }
  return mine.launched;
}

// ---- LaneMeeting ----
LaneMeeting::LaneMeeting(int lanes, std::chrono::milliseconds timeout, std::function<bool()> peers_failed)
    : lanes_(lanes), timeout_(timeout), peers_failed_(std::move(peers_failed)) {
  LOCKSTEP_CHECK(lanes >= 1, "LaneMeeting: ", lanes, " lanes");
  for (auto& p : posted_) p.assign(static_cast<std::size_t>(lanes), {});
}

void LaneMeeting::throw_aborted() const {
  throw DistributedError("a graph's lanes stopped meeting: " + aborted_);
}

std::vector<void*> LaneMeeting::exchange(int lane, const std::vector<void*>& to) { return exchange(lane, to, {}); }

std::vector<void*> LaneMeeting::exchange(int lane, const std::vector<void*>& to, const Last& last) {
  LOCKSTEP_CHECK(lane >= 0 && lane < lanes_ && to.size() == static_cast<std::size_t>(lanes_), "LaneMeeting: lane ",
                 lane, " of ", lanes_, " handed ", to.size(), " values");
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.empty()) throw_aborted();
  const std::uint64_t gen = generation_.load(std::memory_order_relaxed);
  auto& slot = posted_[gen & 1];
  slot[static_cast<std::size_t>(lane)] = to;
  if (++arrived_ == lanes_) {
    arrived_ = 0;
    if (last) {
      try {
        last(slot);
      } catch (const std::exception& e) {
        if (aborted_.empty()) aborted_ = "lane " + std::to_string(lane) + " failed: " + e.what();
        cv_.notify_all();
        throw_aborted();
      }
    }
    meetings_.fetch_add(1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
  } else {
    // The others are usually microseconds away (their threads queue the same step): yield a while
    // before sleeping.
    lock.unlock();
    for (int i = 0; i < 2000 && generation_.load(std::memory_order_acquire) == gen; ++i) std::this_thread::yield();
    lock.lock();
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (generation_.load(std::memory_order_relaxed) == gen) {
      if (!aborted_.empty()) throw_aborted();
      if (peers_failed_ && peers_failed_()) {
        aborted_ = "another lane failed";
        cv_.notify_all();
        throw_aborted();
      }
      if (std::chrono::steady_clock::now() >= deadline)
        throw DistributedError("a graph's lanes: lane " + std::to_string(lane) + " waited " +
                               std::to_string(timeout_.count()) + " ms for the others, which did not come");
      cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
  std::vector<void*> from(static_cast<std::size_t>(lanes_), nullptr);
  for (std::size_t i = 0; i < from.size(); ++i) from[i] = slot[i][static_cast<std::size_t>(lane)];
  return from;
}

void LaneMeeting::abort(int lane, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = "lane " + std::to_string(lane) + " failed: " + why;
  cv_.notify_all();
}

void LaneMeeting::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_.clear();
  arrived_ = 0;
  generation_.fetch_add(1, std::memory_order_release);
}

Tensor StepGraph::static_input(const Tensor& t) {
  Tensor copy = t.clone();
  detail::share_host_copy(t, copy);
  return copy;
}

void StepGraph::refill(Tensor& input, const Tensor& t) const {
  for (const InputCheck& c : input_checks_)
    if (c.input == input.raw_data()) c.check(t);
  input.copy_from(t);
}

bool StepGraph::check_before_replay(const Tensor& input, std::function<void(const Tensor&)> check) {
  if (!t_input_checks) return false;
  t_input_checks->emplace_back(input.raw_data(), std::move(check));
  return true;
}

}  // namespace lockstep
