#include "lockstep/tensor/step_capture.hpp"

#include <algorithm>

#include "backend/capture.hpp"
#include "backend/context.hpp"
#include "backend/devices.hpp"

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

StepGraph::StepGraph(ComputeContext& ctx, const std::function<void()>& work) : ctx_(&ctx) {
  const ComputeScope scope(ctx);
  GraphPool pool(ctx);
  backend::begin_capture(ctx);
  try {
    work();
  } catch (...) {
    (void)backend::end_capture(ctx, false);
    throw;
  }
  graph_ = pool.keep_with(backend::end_capture(ctx, true));
}

void StepGraph::replay() { backend::replay_graph(*ctx_, graph_.get()); }

}  // namespace lockstep
