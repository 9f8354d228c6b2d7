#pragma once
// Keras optimizers with Keras' update rules and defaults. apply_gradients() updates the
// variables in place; slots (momentum, Adam moments) are Variables made on first use per
// variable, placed like it (one copy per replica of a mirrored variable). An optimizer keeps no
// replica or shard state: the exchange and any sharding of the update are the strategy's.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/core/step_state.hpp"

namespace lockstep::optimizers {

/// Learning rate as a function of the step (iterations before this update).
using Schedule = std::function<double(std::int64_t step)>;

struct OptimizerOptions {
  double learning_rate = 0.001;
  Schedule schedule;                    // overrides learning_rate when set
  std::optional<double> clipnorm;       // per-variable gradient L2-norm clip
  std::optional<double> global_clipnorm;
  std::optional<double> clipvalue;      // elementwise clip to [-v, v]
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerOptions options);
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;

  /// Applies one update; gradients may be undefined (the variable is skipped, as Keras warns).
  /// Inside strategy.run (a replica function), as TF: the gradients are all-reduced (summed)
  /// across the replicas, each replica updates its own copies, and iterations() advances once
  /// for the step, not once per replica. Throws ValueError when a variable is not mirrored
  /// over the replicas (the model was made outside strategy.scope()). Through
  /// apply_gradients_in_replica, so a LossScaleOptimizer unscales and skips as there.
  void apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars);
  /// apply_gradients(zip(grads, vars)): the i-th gradient belongs to the i-th variable.
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  /// The rule of step `step` on gradients already summed, without advancing iterations(): each
  /// replica on its own copies (their slots are its own too). No unscaling, no exchange. Safe to
  /// call from several replica threads at once.
  void apply_gradients_at(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars, std::int64_t step);
  void finish_step() { iterations_.fetch_add(1); }
  /// What apply_gradients_in_replica did with one replica's gradients.
  enum class StepOutcome {
    kHeldBack,  // no_sync held them back (gradient accumulation): nothing applied
    kApplied,
    kSkipped,   // not usable (a LossScaleOptimizer found a gradient infinite or NaN): nothing applied
  };
  /// One replica's part of step `step` (what apply_gradients runs, in strategy.run or alone,
  /// and fit's train step), the one route of an update: hands `grads` to the replica's exchange
  /// with this optimizer's elementwise rule, which sums them over the replicas (adding any that
  /// no_sync held back) and, where the strategy shards the update
  /// (MirroredOptions::shard_optimizer_update), applies the rule to this replica's shard of
  /// every variable itself (the strategy's sharded update); otherwise this replica checks the sums
  /// (usable: a LossScaleOptimizer unscales them) and applies the whole update to its copies.
  /// The weights come out bit-identical either way. `replica` null: one device, no exchange.
  /// Does not advance iterations().
  StepOutcome apply_gradients_in_replica(ReplicaInterface* replica, std::vector<Tensor>& grads,
                                         const std::vector<Variable>& vars, std::int64_t step);
  /// A captured step `step` of this replica was replayed (jit_compile): its kernels derived the
  /// step's numbers and advanced the block's count on the device, and the host's record of that
  /// count follows (else the next capture would write the count the host last saw). `ended`
  /// false: a batch whose gradients were held back (gradient accumulation), after which the step
  /// goes on, its numbers derived and its count unchanged (its group's later batches derive
  /// nothing: the block counts the step once).
  void note_replayed_step(std::int64_t step, bool ended);
  /// A capture of this replica's step was discarded (jit_compile): what the host recorded of the
  /// step block while capturing (its numbers derived, its count advanced) never ran, so the next
  /// step derives its numbers and writes its count anew.
  void note_discarded_step();
  /// Before a captured step `step` of this replica is replayed or captured (jit_compile): a count
  /// the host set since this replica's last step (set_iterations, a checkpoint), and the rule and
  /// state it changed (set_learning_rate, a loss scale set), are written into its block now,
  /// eagerly, so that no graph records them (each replay would write them again as they were)
  /// and no replay misses them. `like`: as step_block's.
  void set_step_count_before_replay(std::int64_t step, const Variable& like);
  /// The rule a sharded update applies to ranges, or null where the update of one element
  /// needs more than that element (clipnorm, global_clipnorm, loss scaling): every replica then
  /// updates all of its copies.
  ElementwiseRule* elementwise_rule() { return elementwise() ? &rule_ : nullptr; }
  /// This replica's step block (made like `like` on first use, as a slot) holding the numbers of
  /// step `step`: derived by a kernel from the count it holds, unless derived already. The update
  /// of the step reads it; a train step hands it to dropout first (layers::CallContext).
  Tensor step_block(std::int64_t step, const Variable& like);
  /// Number of updates applied so far. After replayed steps that may have been skipped on the
  /// device (a LossScaleOptimizer's), read from the device once when asked (catch_up_with_device).
  std::int64_t iterations() const;
  /// The host's count, which counts every replayed step as applied and reads nothing: fit numbers
  /// its steps by it (the device's count, which dropout and the update read, stays right).
  std::int64_t host_iterations() const { return iterations_.load(); }
  /// ValueError for a negative count (it numbers the updates, and Adam's bias correction uses it).
  void set_iterations(std::int64_t it);
  /// The learning rate the next update uses.
  double current_learning_rate() const;
  double learning_rate_at(std::int64_t step) const;
  /// Replaces the rate; ValueError unless lr is finite and >= 0. Each replica's step block takes
  /// it before its next step: a captured step reads it there when replayed. TypeError (Keras 3's,
  /// where its learning_rate setter raises it) for an optimizer made with a schedule, which a
  /// rate never replaces. A LossScaleOptimizer's rate is its inner optimizer's: setting either
  /// sets both.
  void set_learning_rate(double lr);
  /// The options it was made with, the rate as set since. A LossScaleOptimizer's are its inner
  /// optimizer's (one owner of the rate).
  const OptimizerOptions& options() const { return rate_owner_->options_; }
  /// Whether it has begun a step or holds slots (after loading them): Keras' `built`, for which a
  /// saved file holds its slots (and a loss scale's state).
  virtual bool built() const;
  /// The rule's own options beyond OptimizerOptions, by Keras name ("momentum", "nesterov" and
  /// "centered" as 0/1, "beta_1", "beta_2", "rho", "epsilon", "weight_decay"), so a saved model
  /// can rebuild it.
  virtual std::map<std::string, double> hyperparameters() const { return {}; }

  /// The names of the slots it keeps per variable, in Keras' order (Adam: "m", "v"; SGD with
  /// momentum: "momentum"; none otherwise).
  virtual std::vector<std::string> slot_names() const = 0;
  /// Keras 3's order of the slots in its optimizer.variables, so in its files: each variable's
  /// slots in turn (true: Adam's add_optimizer_variables of a list of names interleaves them), or
  /// every variable's first slot, then every variable's second, ... (RMSprop makes each list alone).
  virtual bool keras_slots_by_variable() const { return true; }
  /// Slot tensors of a variable by slot name (for checkpoints): the copy current on this
  /// thread of each slot variable (outside the replicas, the primary); created on demand.
  virtual std::vector<std::pair<std::string, Tensor>> slots(const Variable& v);
  /// Gives every copy of a mirrored variable's slots the values of their primary copy (after a
  /// checkpoint was loaded into it, or before training unsharded a variable whose update was
  /// sharded: its slots are then one tensor that every copy shares, and an unsharded update is
  /// a ValueError saying so until this is called).
  virtual void broadcast_slots(const Variable& v);

 protected:
  friend class LossScaleOptimizer;  // runs its inner optimizer's rule
  /// Updates each variable's data with its (clipped) gradient: update_rule_all on the copies
  /// current on this thread and those copies' slots.
  virtual void update_all(const std::vector<Variable>& vars, const std::vector<Tensor>& grads,
                          const Tensor& step_block);
  /// The rule itself, on tensors of one shape: `w` and `slots` (slot_names() order) are
  /// handles on (parts of) a variable's and its slots' memory, updated in place; the step's
  /// numbers (learning rate, bias corrections) are read from `step_block` on the device
  /// (step_block(): lockstep/core/step_state.hpp), never passed as host values.
  virtual void update_rule(Tensor& w, std::vector<Tensor>& slots, const Tensor& grad, const Tensor& step_block) = 0;
  /// update_rule for each ws[i], slots[i], grads[i]: the default calls it for each; SGD, Adam
  /// and RMSprop update them all in one kernel launch (lockstep/tensor/ops_update_all.hpp), the same bits.
  virtual void update_rule_all(std::vector<Tensor>& ws, std::vector<std::vector<Tensor>>& slots,
                               const std::vector<Tensor>& grads, const Tensor& step_block);
  /// update_rule for a shard whose gradient is `grads` summed in their order (((grads[0] +
  /// grads[1]) + ...): GradientShard::grads) and whose new values also go into `copies`, in one
  /// pass; true if done. The default returns false and the caller sums, updates and copies.
  virtual bool update_rule_summed(Tensor& /*w*/, std::vector<Tensor>& /*slots*/, const std::vector<Tensor>& /*grads*/,
                                  const std::vector<Tensor>& /*copies*/, const Tensor& /*step_block*/) {
    return false;
  }
  /// The rule's part of the step's description (its kind and the constants of its bias
  /// corrections); the schedule is the base class's. SGD's is the default.
  virtual void describe_step(step_state::StepRule& /*rule*/) const {}
  /// On the summed gradients, before the rule, with this replica's step block: false skips the
  /// step. The sums are the same on every replica, so every replica decides alike.
  /// LossScaleOptimizer unscales them here and checks them on the device (into the block).
  virtual bool usable(std::vector<Tensor>& /*grads*/, Tensor& /*step_block*/) const { return true; }
  /// Whether the update of one element needs only that element (no clipnorm /
  /// global_clipnorm), so that replicas can share the update (ZeRO stage 1).
  virtual bool elementwise() const;
  /// The state a subclass keeps in the step block besides the count (LossScaleOptimizer's
  /// scale), written from the host's copy into a copy's block before its first step and after
  /// block_state_changed(), eagerly (before a replay or a capture, never inside one).
  virtual void write_block_state(Tensor& /*block*/) const {}
  /// Every copy's block gets write_block_state again before its next step.
  void block_state_changed();
  /// From now on the rate (options(), set_learning_rate) is `owner`'s: a wrapper's steps read the
  /// rate its inner optimizer holds, and take a rate set on either before their next step.
  void share_rate_of(Optimizer& owner);
  /// Whether a replayed step may have been skipped on the device (a loss scale's finite check),
  /// so that the device's count and state may differ from the host's after replays.
  virtual bool skips_on_device() const { return false; }
  /// After replays of steps that may have been skipped: copy 0's block read back once (every
  /// replica decides alike), its count into iterations() and the host's record of every copy,
  /// the rest by read_block_state. A no-op otherwise. Logically const: the host's copy of
  /// numbers the device holds (the fields it corrects are mutable).
  void catch_up_with_device() const;
  virtual void read_block_state(const Tensor& /*block*/) const {}
  /// apply_gradients_in_replica without the end of the step's block.
  StepOutcome exchange_and_apply(ReplicaInterface* replica, std::vector<Tensor>& grads,
                                 const std::vector<Variable>& vars, std::int64_t step);
  /// The slots of the variable copy current on this thread (handles on their memory).
  std::vector<Tensor> slots_of(const Variable& var);
  /// `var`'s slot variables (slot_names() order), made on first use like `var` (mirrored over
  /// the same devices) and kept placed like it. Under slots_mu_.
  const std::vector<Variable>& slot_variables(const Variable& var);
  /// The end of this replica's step, on the host: the count its next step starts from (the
  /// block's is advanced by the next step's step_begin_ unless the step was skipped; `applied`
  /// false: the block marks it so). Launches nothing.
  void end_step_block(std::int64_t step, bool applied);

 private:
  // The optimizer as the sharded update sees it: the rule on ranges, and the slots.
  class Rule final : public ElementwiseRule {
   public:
    explicit Rule(Optimizer& o) : o_(o) {}
    void apply(const std::vector<Variable>& vars, const std::vector<GradientShard>& ranges, std::int64_t step) override;
    std::vector<Tensor> shared_slots(const Variable& var) override;

   private:
    Optimizer& o_;
  };
  struct SlotVariables {
    Variable variable;  // held, so that no other variable comes to have its identity
    std::vector<Variable> slots;
  };
  // The step's numbers on each replica's device: a block per copy (step_state.hpp), and what the
  // host knows of each without reading it.
  struct StepBlocks {
    Variable blocks;
    std::vector<std::int64_t> count;        // the count the block holds (the host set or advanced it)
    std::vector<std::int64_t> derived_for;  // the step its scalars are for, or -1
    std::vector<std::uint8_t> made;         // made for this step (its count set as it was made)
    std::vector<std::int64_t> rule_for;  // the step the block's rule was written for (kRuleForEveryStep,
                                         // kRuleUnwritten since made)
    std::vector<std::uint64_t> rate_version;  // the rate owner's rate_version_ the rule was written at
    std::vector<std::uint8_t> state_written;  // write_block_state done since made or changed
  };
  static constexpr std::int64_t kRuleUnwritten = -1;
  static constexpr std::int64_t kRuleForEveryStep = -2;
  /// The step's description: the schedule (a function of one's own: the host's rate of `step`,
  /// as a constant) and describe_step's part; `holds_for` the step it holds for
  /// (kRuleForEveryStep unless the rate is that function's).
  step_state::StepRule step_rule(std::int64_t step, std::int64_t& holds_for) const;
  /// This thread's copy of the blocks (made like `like` where there are none). Under slots_mu_.
  std::size_t step_copy(const Variable& like);
  /// What the host keeps in copy `r`'s block, written into it where the block does not hold it
  /// for step `step` yet: the rule (since made or a rate was set; each step's where a function
  /// of one's own gives the rate) and write_block_state (since made or block_state_changed).
  void write_block_state_once(std::size_t r, Tensor& block, std::int64_t step);

  OptimizerOptions options_;
  // Whose options (and rate) this optimizer's steps use: itself, or a wrapper's inner optimizer.
  Optimizer* rate_owner_ = this;
  // Advanced by each set_learning_rate, so that every block sharing the rate rewrites its rule.
  std::atomic<std::uint64_t> rate_version_{0};
  // Replicas of apply_gradients count a step once; after replays, corrected from the device
  // (catch_up_with_device, as the host's record in step_).
  mutable std::atomic<std::int64_t> iterations_{0};
  mutable std::atomic<bool> device_ahead_{false};  // replays ran that the host counted as applied
  mutable std::mutex slots_mu_;  // replicas create their slots concurrently
  // Per variable (Variable::identity: one entry for all of its copies), as Keras: the slots
  // are variables, mirrored like it, so each replica reads its own copy of them.
  std::unordered_map<const void*, SlotVariables> slots_;
  mutable StepBlocks step_;
  Rule rule_{*this};
};
using OptimizerPtr = std::shared_ptr<Optimizer>;

struct SGDOptions : OptimizerOptions {
  SGDOptions() { learning_rate = 0.01; }
  double momentum = 0.0;
  bool nesterov = false;
};
struct AdamOptions : OptimizerOptions {
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
};
struct AdamWOptions : AdamOptions {
  double weight_decay = 0.004;
};

/// Keras 3's RMSprop (keras.optimizers.RMSprop), its arguments and defaults.
struct RMSpropOptions : OptimizerOptions {
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
};

OptimizerPtr SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false);
OptimizerPtr SGD(const SGDOptions& options);
OptimizerPtr Adam(double learning_rate = 0.001);
OptimizerPtr Adam(const AdamOptions& options);
OptimizerPtr AdamW(double learning_rate = 0.001, double weight_decay = 0.004);
OptimizerPtr AdamW(const AdamWOptions& options);
/// RMSprop; its slots are Keras' "velocity", then "momentum" where momentum > 0 and
/// "average_gradient" where centered. ValueError for rho or momentum outside [0, 1], a negative
/// or infinite epsilon.
OptimizerPtr RMSprop(double learning_rate = 0.001);
OptimizerPtr RMSprop(const RMSpropOptions& options);
/// By name ("sgd", "adam", "adamw", "rmsprop") with a learning rate.
OptimizerPtr get(const std::string& name, double learning_rate);
/// By name, with a learning-rate schedule (optimizers/schedules.hpp) and the rule's defaults.
OptimizerPtr get(const std::string& name, Schedule schedule);

}  // namespace lockstep::optimizers
