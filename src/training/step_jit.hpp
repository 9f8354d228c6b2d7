#pragma once
// jit_compile for a model's step functions (Keras' train_function, test_function and
// predict_function), one StepJit each: the first whole step after compile (or set_jit_compile,
// or distribute) runs eagerly, watched by a StepCaptureCheck; then either every later step is
// replayed from a graph per input signature (StepReplays) or all run eagerly, "auto" saying why
// once on a GPU and true refusing by name. Logical replicas of one GPU capture their steps as
// one graph; replicas on several GPUs or workers run eagerly, said so.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "lockstep/optimizers/optimizer.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "lockstep/training/jit_compile.hpp"
#include "training/step_replay.hpp"

namespace lockstep::detail {

/// The device a model's steps run on: its strategy's first replica's, else this thread's.
const Device& step_device(const distribute::Strategy* strategy);
/// Why the replicas' steps cannot be captured together into one graph (StepGraph's lanes), or
/// empty (one replica, or logical replicas of one GPU).
std::string replicas_capture_refusal(distribute::Strategy& strategy);
/// The replicas' meeting when several capture one graph together, else null.
std::unique_ptr<LaneMeeting> step_lanes(distribute::Strategy* strategy);
/// The lane of `replica` among its worker's replicas (0 without one).
int lane_of(ReplicaInterface* replica);
/// The check watching a step function's first step (`step`: "train", "test" or "predict");
/// under true, ValueError naming `device` where it cannot capture at all.
std::unique_ptr<StepCaptureCheck> start_capture_check(JitCompile mode, const Device& device, const std::string& step);
/// After that step: why its steps run eagerly, empty where they are captured from now on. Under
/// true a reason is a ValueError naming it; under "auto" on a GPU it is said once.
std::string decide_capture(const StepCaptureCheck& check, JitCompile mode, const Device& device,
                           distribute::Strategy* strategy, const std::string& model, const std::string& step);
/// Why `model`'s `step` steps (`all`: every one, else some) run eagerly, as jit_compile's `mode`
/// treats it, the one rule for both: under true a ValueError naming `why`; under "auto", on a GPU,
/// a line naming it (the CPU never captures). The caller says it once.
void say_eager(JitCompile mode, const Device& device, const std::string& model, const std::string& step, bool all,
               const std::string& why);

// How one call of a step function meets jit_compile beside its slices: fit's train step's terms;
// evaluate's and predict's take the defaults.
struct StepTerms {
  /// False: the step is not checked (an accumulation group's held-back batch applies nothing:
  /// the check waits for a whole step), and a replay leaves the optimizer's step going on.
  bool whole = true;
  /// False: the step runs eagerly where steps are replayed, unsaid (a held-back batch before
  /// its group's sums have memory, which an eager batch makes).
  bool replayable = true;
  /// Not empty: why the step runs eagerly where steps are replayed, refused under true and said
  /// once under "auto" as a step's uncapturable op is (say_eager), and jit_compile's reason since.
  std::string_view eager;
  /// The host numbers the step takes beside its slice (fit's: the batch's first example in its
  /// accumulation group, the group's examples, and whether the batch applies the group's
  /// gradients or holds them back): part of its signature, since a graph replays them as
  /// captured.
  std::array<std::int64_t, 3> key{};
  /// The optimizer whose step `step` this is (null: none), `like` as its step block's. Around a
  /// replay or capture on each replica's thread: a count the host set between steps is written
  /// first (a capture would record it as a constant), a replay advances the host's record of the
  /// count (a whole step's; a held-back batch's leaves the step begun), a discarded capture
  /// forgets what it recorded.
  optimizers::Optimizer* optimizer = nullptr;
  std::int64_t step = 0;
  Variable like;
};

class StepJit {
 public:
  /// `step`: "train", "test" or "predict", the word the messages use.
  explicit StepJit(std::string step) : step_(std::move(step)) {}

  /// One step of `model` on `batch` through the replicas (run_on_slices): `f(slice, first_row,
  /// replica)` gives a replica's numbers. The first whole step after a reset is checked and
  /// decides; later ones are replayed (f then runs once per signature, inside its capture) or
  /// run eagerly. `settle(parts)` runs on the host after the replicas, before the checked step
  /// decides. Under true, ValueError naming the device (before the step) or what blocks capture
  /// (after it).
  template <typename F, typename S>
  distribute::PerReplica<ReplicaNumbers> step(distribute::Strategy* strategy, const distribute::DistributedBatch& batch,
                                              JitCompile mode, const std::string& model, const StepTerms& terms, F&& f,
                                              S&& settle) {
    const Device& device = step_device(strategy);
    if (!terms.eager.empty() && mode != JitCompile::kOff) run_eagerly(terms.eager, mode, device, model);
    const std::unique_ptr<StepCaptureCheck> watch = terms.whole ? check(mode, device) : nullptr;
    const bool replayed = replays_ && terms.replayable && terms.eager.empty();
    const auto run_all = [&] {
      return run_on_slices(strategy, batch, [&](const data::Element& s, std::int64_t first, ReplicaInterface* rc) {
        const StepCaptureCheck::OnThisThread watched(watch.get());
        const auto one = [&](const data::Element& in) { return f(in, first, rc); };
        return replayed ? replay(lane_of(rc), s, terms, one) : one(s);
      });
    };
    auto parts = replayed ? replays_->run_lanes(run_all, reason_) : run_all();
    settle(parts);
    if (watch) decide(*watch, mode, device, strategy, model);
    return parts;
  }
  /// The same for a step that takes no terms and settles nothing (evaluate's, predict's).
  template <typename F>
  distribute::PerReplica<ReplicaNumbers> step(distribute::Strategy* strategy, const distribute::DistributedBatch& batch,
                                              JitCompile mode, const std::string& model, F&& f) {
    return step(strategy, batch, mode, model, StepTerms{}, std::forward<F>(f),
                [](const distribute::PerReplica<ReplicaNumbers>&) {});
  }
  /// Why the steps run eagerly: empty before the check, under off, and while they are replayed,
  /// unless some ran eagerly for a reason of their own (StepTerms::eager).
  const std::string& reason() const { return reason_.empty() ? eager_reason_ : reason_; }

 private:
  /// The check watching the next step, or null where decided already or under off; under true,
  /// ValueError naming the device where it cannot capture.
  std::unique_ptr<StepCaptureCheck> check(JitCompile mode, const Device& device) const;
  /// After the checked step: replays from now on where the device, every op and the replicas'
  /// layout allow, else eager with the reason (said once under "auto" on a GPU; ValueError
  /// naming it under true).
  void decide(const StepCaptureCheck& check, JitCompile mode, const Device& device, distribute::Strategy* strategy,
              const std::string& model);
  /// Lane `lane`'s step on `slice` replayed (captured first for a new signature), with the
  /// optimizer's count around it (terms).
  ReplicaNumbers replay(int lane, const data::Element& slice, const StepTerms& terms, const StepReplays::Step& step);
  /// Before a step that runs eagerly for `why` (StepTerms::eager): ValueError under true, said
  /// once under "auto".
  void run_eagerly(std::string_view why, JitCompile mode, const Device& device, const std::string& model);

  std::string step_;
  bool checked_ = false;
  std::string reason_;
  std::string eager_reason_;  // StepTerms::eager of the first step that ran eagerly for one
  std::unique_ptr<StepReplays> replays_;
};

}  // namespace lockstep::detail
