#pragma once
// jit_compile's replays in fit: a train step captured once per input signature into a device
// graph (StepGraph) and replayed. The step's inputs are static tensors the graph reads: each
// later step copies its slice into them (on the context's queue, after the input path's upload
// and before the replay), so the upload stays outside the graph. The loss sum and metric states
// the captured step returned are the graph's outputs, copied out after each replay (an execution
// of several steps keeps each step's numbers until it reads them). evaluate's and predict's
// steps are replayed the same way (step_jit.hpp), predict's outputs copied out too.
// Logical replicas of one GPU (lanes) capture their steps together into one graph (StepGraph's
// lanes, forked from lane 0): each lane's thread calls run with its slice; a replay is one
// meeting of the lanes (StepGraph::replay_lanes), which also checks that every lane refilled the
// graph of the step's joint signature (all their signatures), each guessing it from its own.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
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
  /// `step`: "train", "test" or "predict", the word the messages use; the steps of
  /// meeting->lanes() contexts, each run by its own thread (null: one context's).
  explicit StepReplays(std::string step = "train", std::unique_ptr<LaneMeeting> meeting = nullptr);

  /// One train step on `slice` with the context of this thread: replayed from the graph of the
  /// slice's signature (shapes and dtypes, and `key`: the host numbers the step takes), captured
  /// first where there is none yet. `step` runs the step on what it is given. A capture that
  /// fails (an op the check did not see waits for the host) is discarded and said once; every
  /// later step runs eagerly, and so does this one on one context (several: it throws, and the
  /// caller runs the step again, eagerly, on every lane).
  /// `discarded` is called where a capture was discarded, before anything else runs (what the
  /// host recorded while capturing never ran on the device).
  ReplicaNumbers run(const data::Element& slice, std::span<const std::int64_t> key, const Step& step,
                     const std::function<void()>& discarded = {}) {
    return run(0, slice, key, step, discarded);
  }
  /// Lane `lane`'s part of the step: every lane calls it, each on its own thread, for each step.
  ReplicaNumbers run(int lane, const data::Element& slice, std::span<const std::int64_t> key, const Step& step,
                     const std::function<void()>& discarded = {});
  /// Between steps, with lanes: a step that failed may have left the lanes' meeting half met.
  void begin_step();
  /// One step of every lane: `run` (the lanes' calls of run above, through the replicas); where
  /// the lanes' capture failed in it, `run` again, eagerly, as every later step. A failure's
  /// reason goes to `reason`.
  distribute::PerReplica<ReplicaNumbers> run_lanes(const std::function<distribute::PerReplica<ReplicaNumbers>()>& run,
                                                   std::string& reason);
  /// How many signatures have a graph (tests).
  std::size_t graphs() const { return lanes_[0].graphs.size(); }
  /// Why a capture failed (every step then runs eagerly); empty while none did.
  std::string failure() const;

 private:
  /// Copies of a graph's numbers kept for reuse at most (an execution of more steps copies the
  /// rest into new memory).
  static constexpr std::size_t kMaxSpares = 16;
  struct Graph {
    data::Element inputs;  // static: refilled in place before each replay
    ReplicaNumbers outputs;
    std::unique_ptr<StepGraph> graph;
    std::vector<ReplicaNumbers> spares;  // earlier steps' copies of `outputs`, reused once no one holds them
  };
  std::string step_;
  struct Lane {
    std::map<std::string, Graph> graphs;
    std::string signature;  // this step's, read by the other lanes
    std::map<std::string, std::string> joint_of;  // this lane's signature: the graph's key it had last
  };
  /// With lanes, the graph's key: every lane's signature of this step.
  std::string joint_signature() const;
  /// With lanes: the graph of the joint signature this lane's signature had last, refilled from
  /// `slice` and replayed in one meeting where every lane guessed that step's graph (its numbers
  /// into `out`); false on every lane where one did not (nothing replayed).
  bool replay_guessed(int lane, const data::Element& slice, ReplicaNumbers& out);
  void refill(Graph& g, const data::Element& slice);
  /// The graph's outputs copied out for the step's caller (the next replay writes over them).
  static ReplicaNumbers copied_out(Graph& g);
  void fail(const std::string& why);

  std::unique_ptr<LaneMeeting> meeting_;
  std::vector<Lane> lanes_;
  bool said_full_ = false;
  mutable std::mutex mu_;
  std::string failure_;  // guarded by mu_
};

}  // namespace lockstep::detail
