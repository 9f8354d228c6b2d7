// fit's captured train steps, replayed per input signature (step_replay.hpp).
#include "training/step_replay.hpp"

#include <charconv>
#include <cstdio>

#include "lockstep/core/error.hpp"

namespace lockstep::detail {

namespace {
// The slice's signature written over `out` (the lane's last: its memory kept, no string made per
// step): the key's numbers, then each tensor's dtype and shape, as "0/64;float32(64, 784);int64(64)".
void write_signature(std::string& out, const data::Element& slice, std::span<const std::int64_t> key) {
  char digits[24];
  const auto number = [&](std::int64_t n) { out.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr); };
  out.clear();
  for (std::size_t k = 0; k < key.size(); ++k) {
    if (k) out.push_back('/');
    number(key[k]);
  }
  for (const Tensor& t : slice) {
    out.append(";").append(dtype_name(t.dtype())).push_back('(');
    const std::vector<std::int64_t>& dims = t.shape().dims();
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (d) out.append(", ");
      number(dims[d]);
    }
    out.append(dims.size() == 1 ? ",)" : ")");
  }
}

// Whether nothing but `r` holds its numbers' tensors or their memory (the caller that had them
// dropped them: an execution's numbers once merged).
bool unheld(const ReplicaNumbers& r) {
  const auto alone = [](const Tensor& t) {
    return !t.defined() || (t.impl().use_count() == 1 && t.impl()->storage.use_count() == 1);
  };
  if (!alone(r.loss_sum)) return false;
  for (const Tensor& t : r.output_loss_sums)
    if (!alone(t)) return false;
  for (const Tensor& t : r.metric_states)
    if (!alone(t)) return false;
  return true;
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

std::string StepReplays::joint_signature() const {
  std::string joint;
  for (const Lane& l : lanes_) joint += (joint.empty() ? "" : " | ") + l.signature;
  return joint;
}

bool StepReplays::replay_guessed(int lane, const data::Element& slice, ReplicaNumbers& out) {
  Lane& mine = lanes_[static_cast<std::size_t>(lane)];
  const auto guess = mine.joint_of.find(mine.signature);
  Graph* g = guess == mine.joint_of.end() ? nullptr : &mine.graphs.at(guess->second);
  if (g) refill(*g, slice);
  // Every lane guessed the graph of the joint signature of this step's: each lane's signature is
  // written before the meeting and read in it (the next is written after every lane left it).
  const auto agree = [this](const std::vector<const void*>& tokens) {
    const std::string joint = joint_signature();
    for (const void* t : tokens)
      if (*static_cast<const std::string*>(t) != joint) return false;
    return true;
  };
  if (!StepGraph::replay_lanes(*meeting_, lane, current_compute_context(), g ? g->graph.get() : nullptr,
                               g ? &guess->second : nullptr, agree))
    return false;
  out = copied_out(*g);
  return true;
}

ReplicaNumbers StepReplays::copied_out(Graph& g) {
  const ReplicaNumbers& r = g.outputs;
  if (!r.outputs.empty()) return copied(r);  // predict's outputs: its caller keeps them
  // Into an earlier step's copy nothing holds any more (on this context's queue, after the reads
  // of that copy's numbers), else into new memory kept for later steps: no tensor made per step.
  for (ReplicaNumbers& spare : g.spares) {
    if (!unheld(spare)) continue;
    if (r.loss_sum.defined()) spare.loss_sum.copy_from(r.loss_sum);
    for (std::size_t k = 0; k < r.output_loss_sums.size(); ++k) spare.output_loss_sums[k].copy_from(r.output_loss_sums[k]);
    for (std::size_t k = 0; k < r.metric_states.size(); ++k) spare.metric_states[k].copy_from(r.metric_states[k]);
    spare.gradients_finite = r.gradients_finite;
    return spare;
  }
  ReplicaNumbers out = copied(r);
  if (g.spares.size() < kMaxSpares) g.spares.push_back(out);
  return out;
}

void StepReplays::refill(Graph& g, const data::Element& slice) {
  for (std::size_t i = 0; i < slice.size(); ++i) g.graph->refill(g.inputs[i], slice[i]);
}

ReplicaNumbers StepReplays::run(int lane, const data::Element& slice, std::span<const std::int64_t> key, const Step& step,
                                const std::function<void()>& discarded) {
  if (!failure().empty()) return step(slice);
  Lane& mine = lanes_[static_cast<std::size_t>(lane)];
  write_signature(mine.signature, slice, key);
  // With lanes, the steady state meets once: each lane replays the graph its signature had last.
  // Where they did not all guess the step's (a new signature), that meeting told every lane
  // every lane's signature: the graph of the joint one is captured or replayed.
  ReplicaNumbers guessed;
  if (meeting_ && replay_guessed(lane, slice, guessed)) return guessed;
  std::string joint;
  const std::string& sig = meeting_ ? (joint = joint_signature()) : mine.signature;
  auto& graphs = mine.graphs;  // every lane's hold the same keys
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
    refill(it->second, slice);
  }
  mine.joint_of[mine.signature] = sig;
  it->second.graph->replay();
  return copied_out(it->second);
}

}  // namespace lockstep::detail
