#include "lockstep/tensor/step_capture.hpp"

#include <algorithm>

#include "backend/capture.hpp"
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

StepGraph::StepGraph(ComputeContext& ctx, const std::function<void()>& work) : ctx_(&ctx) {
  const ComputeScope scope(ctx);
  backend::begin_capture(ctx);
  try {
    work();
  } catch (...) {
    (void)backend::end_capture(ctx, false);
    throw;
  }
  graph_ = backend::end_capture(ctx, true);
}

void StepGraph::replay() { backend::replay_graph(*ctx_, graph_.get()); }

}  // namespace lockstep
