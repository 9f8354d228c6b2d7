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

ReplicaNumbers StepReplays::run(const data::Element& slice, const std::string& key, const Step& step) {
  if (!failure_.empty()) return step(slice);
  const std::string sig = signature(slice, key);
  auto it = graphs_.find(sig);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) {
      if (!said_full_)
        std::fprintf(
            stderr,
            "jit_compile: %zu input signatures have captured %s steps; steps of other signatures run "
            "eagerly (this one: %s)\n",
            kMaxGraphs, step_.c_str(), sig.c_str());
      said_full_ = true;
      return step(slice);
    }
    Graph g;
    for (const Tensor& t : slice) g.inputs.push_back(StepGraph::static_input(t));
    try {
      g.graph = std::make_unique<StepGraph>(current_compute_context(), [&] { g.outputs = step(g.inputs); });
    } catch (const Error& e) {
      failure_ = e.what();
      std::fprintf(stderr,
                   "jit_compile: the %s step could not be captured, so %s steps run eagerly: %s\n",
                   step_.c_str(), step_.c_str(), failure_.c_str());
      return step(slice);
    }
    it = graphs_.emplace(sig, std::move(g)).first;
  } else {
    for (std::size_t i = 0; i < slice.size(); ++i) it->second.graph->refill(it->second.inputs[i], slice[i]);
  }
  it->second.graph->replay();
  return copied(it->second.outputs);
}

}  // namespace lockstep::detail
