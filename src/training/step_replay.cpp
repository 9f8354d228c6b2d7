// fit's captured train steps, replayed per input signature (step_replay.hpp).
#include "training/step_replay.hpp"

#include <cstdio>

#include "lockstep/core/error.hpp"

namespace lockstep::detail {

namespace {
std::string signature(const data::Element& slice, const std::string& key) {
  std::string s = key;
  for (const Tensor& t : slice) s += std::string(";") + dtype_name(t.dtype()) + t.shape().str();
  return s;
}

ReplicaNumbers copied(const ReplicaNumbers& r) {
  ReplicaNumbers out = r;
  out.loss_sum = r.loss_sum.defined() ? r.loss_sum.clone() : r.loss_sum;
  for (Tensor& t : out.output_loss_sums) t = t.clone();
  for (Tensor& t : out.metric_states) t = t.clone();
  for (Tensor& t : out.outputs) t = t.clone();
  return out;
}
}  // namespace

StepReplays::StepReplays(std::string step, std::unique_ptr<LaneMeeting> meeting)
    : step_(std::move(step)),
      meeting_(std::move(meeting)), lanes_(static_cast<std::size_t>(meeting_ ? meeting_->lanes() : 1)) {}

void StepReplays::begin_step() {
  if (meeting_) meeting_->reset();
}

distribute::PerReplica<ReplicaNumbers> StepReplays::run_lanes(
    const std::function<distribute::PerReplica<ReplicaNumbers>()>& run, std::string& reason) {
  begin_step();
  const bool failed_before = !failure().empty();
  try {
    auto parts = run();
    if (!failed_before && !failure().empty()) reason = failure();
    return parts;
  } catch (const Error&) {
    // The lanes' capture failed (said once): they run this step again, eagerly, as every later one.
    if (failed_before || failure().empty()) throw;
    reason = failure();
    begin_step();
    return run();
  }
}

std::string StepReplays::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void StepReplays::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) return;
  failure_ = why;
  std::fprintf(stderr, "jit_compile: the %s step could not be captured, so %s steps run eagerly: %s\n",
               step_.c_str(), step_.c_str(), why.c_str());
}

std::string StepReplays::joint_signature(int lane, const data::Element& slice, const std::string& key) {
  Lane& mine = lanes_[static_cast<std::size_t>(lane)];
  mine.signature = signature(slice, key);
  if (!meeting_) return mine.signature;
  // Each lane's is read after the meeting, and written again only in the next step (after every
  // lane's run returned).
  (void)meeting_->exchange(lane, std::vector<void*>(lanes_.size(), nullptr));
  std::string joint;
  for (const Lane& l : lanes_) joint += (joint.empty() ? "" : " | ") + l.signature;
  return joint;
}

ReplicaNumbers StepReplays::run(int lane, const data::Element& slice, const std::string& key, const Step& step,
                                const std::function<void()>& discarded) {
  if (!failure().empty()) return step(slice);
  const std::string sig = joint_signature(lane, slice, key);
  auto& graphs = lanes_[static_cast<std::size_t>(lane)].graphs;  // every lane's hold the same keys
  auto it = graphs.find(sig);
  if (it == graphs.end()) {
    if (graphs.size() >= kMaxGraphs) {
      if (lane == 0 && !said_full_)
        std::fprintf(
            stderr,
            "jit_compile: %zu input signatures have captured %s steps; steps of other signatures run "
            "eagerly (this one: %s)\n",
            kMaxGraphs, step_.c_str(), sig.c_str());
      if (lane == 0) said_full_ = true;
      return step(slice);
    }
    Graph g;
    for (const Tensor& t : slice) g.inputs.push_back(StepGraph::static_input(t));
    try {
      const auto work = [&] { g.outputs = step(g.inputs); };
      ComputeContext& ctx = current_compute_context();
      g.graph = meeting_ ? std::make_unique<StepGraph>(ctx, lane, *meeting_, work) : std::make_unique<StepGraph>(ctx, work);
    } catch (const Error& e) {
      if (discarded) discarded();
      // With lanes, a DistributedError is a peer's failure or the collectives': not this capture's.
      if (meeting_ && dynamic_cast<const DistributedError*>(&e)) throw;
      fail(e.what());
      if (meeting_) throw;  // the peers are released by the meeting and the collectives
      return step(slice);
    }
    it = graphs.emplace(sig, std::move(g)).first;
  } else {
    for (std::size_t i = 0; i < slice.size(); ++i) it->second.graph->refill(it->second.inputs[i], slice[i]);
  }
  it->second.graph->replay();
  return copied(it->second.outputs);
}

}  // namespace lockstep::detail
