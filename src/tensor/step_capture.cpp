#include "lockstep/tensor/step_capture.hpp"

#include <algorithm>

#include "backend/capture.hpp"
#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "tensor/host_copy.hpp"

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

StepGraph::StepGraph(ComputeContext& ctx, const std::function<void()>& work) : ctx_(&ctx) {
  const ComputeScope scope(ctx);
  GraphPool pool(ctx);
  std::vector<std::pair<const void*, std::function<void(const Tensor&)>>> checks;
  auto* const outer = t_input_checks;
  t_input_checks = &checks;
  backend::begin_capture(ctx);
  try {
    work();
  } catch (...) {
    t_input_checks = outer;
    (void)backend::end_capture(ctx, false);
    throw;
  }
  t_input_checks = outer;
  graph_ = pool.keep_with(backend::end_capture(ctx, true));
  for (auto& [input, check] : checks) input_checks_.push_back({input, std::move(check)});
}

void StepGraph::replay() { backend::replay_graph(*ctx_, graph_.get()); }

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
