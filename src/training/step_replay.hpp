#pragma once
// jit_compile's replays in fit: a replica's train step captured once per input signature into
// a device graph (StepGraph) and replayed. The step's inputs are static tensors the graph reads:
// each later step copies its slice into them (on the context's queue, after the input path's
// upload and before the replay), so the upload stays outside the graph. The loss sum and metric
// states the captured step returned are the graph's outputs, copied out after each replay (an
// execution of several steps keeps each step's numbers until it reads them). evaluate's and
// predict's steps are replayed the same way (step_jit.hpp), predict's outputs copied out too.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/step_capture.hpp"
#include "training/replica_slices.hpp"

namespace lockstep::detail {

class StepReplays {
 public:
  /// Graphs kept at most: a signature past them runs eagerly, saying so once.
  static constexpr std::size_t kMaxGraphs = 8;
  using Step = std::function<ReplicaNumbers(const data::Element& slice)>;
  /// `step`: "train", "test" or "predict", the word the messages use.
  explicit StepReplays(std::string step = "train") : step_(std::move(step)) {}

  /// One train step on `slice` with the context of this thread: replayed from the graph of the
  /// slice's signature (shapes and dtypes, and `key`: the host numbers the step takes), captured
  /// first where there is none yet. `step` runs the step on what it is given. A capture that
  /// fails (an op the check did not see waits for the host) is discarded, said once, and this
  /// and every later step run eagerly.
  ReplicaNumbers run(const data::Element& slice, const std::string& key, const Step& step);
  /// How many signatures have a graph (tests).
  std::size_t graphs() const { return graphs_.size(); }
  /// Why a capture failed (every step then runs eagerly); empty while none did.
  const std::string& failure() const { return failure_; }

 private:
  struct Graph {
    data::Element inputs;  // static: refilled in place before each replay
    ReplicaNumbers outputs;
    std::unique_ptr<StepGraph> graph;
  };
  std::string step_;
  std::map<std::string, Graph> graphs_;
  bool said_full_ = false;
  std::string failure_;
};

}  // namespace lockstep::detail
