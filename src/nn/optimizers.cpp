#include <algorithm>
#include <cmath>

#include "lockstep/optimizers/optimizer.hpp"

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_clip.hpp"
#include "lockstep/tensor/ops_update_all.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "nn/schedule_desc.hpp"

namespace lockstep::optimizers {

namespace {
// An infinite or NaN hyper-parameter trains to NaN and is saved as JSON null, which nothing can
// load back: refused where it is given.
void check_finite_at_least(double v, double lo, bool inclusive, const char* what) {
  LOCKSTEP_CHECK(std::isfinite(v) && (inclusive ? v >= lo : v > lo), "optimizer: ", what, " must be a finite number ",
                 inclusive ? ">= " : "> ", lo, ", got ", v);
}

// Under jit_compile's check: a schedule only the host can evaluate keeps the step from being captured.
void note_capture_refusal(const std::string& optimizer, const Schedule& schedule) {
  if (StepCaptureCheck* check = current_step_capture_check()) [[unlikely]]
    if (const char* why = schedules::capture_refusal(schedule))
      check->block(detail::concat(optimizer, "'s learning rate comes from ", why));
}

// The index of this thread's copy of `v` (0 outside the replicas).
std::size_t this_copy(const Variable& v) {
  const Tensor& mine = v.value();
  for (int r = 0; r < v.num_copies(); ++r)
    if (v.copy(r).impl() == mine.impl()) return static_cast<std::size_t>(r);
  return 0;
}

std::vector<std::pair<Tensor, Variable>> zip_pairs(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  std::vector<std::pair<Tensor, Variable>> gv;
  gv.reserve(grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) gv.emplace_back(grads[i], vars[i]);
  return gv;
}
}  // namespace

Optimizer::Optimizer(OptimizerOptions options) : options_(std::move(options)) {
  check_finite_at_least(options_.learning_rate, 0, true, "learning_rate");
  if (options_.clipnorm) check_finite_at_least(*options_.clipnorm, 0, false, "clipnorm");
  if (options_.global_clipnorm) check_finite_at_least(*options_.global_clipnorm, 0, false, "global_clipnorm");
  if (options_.clipvalue) check_finite_at_least(*options_.clipvalue, 0, false, "clipvalue");
}

void Optimizer::set_learning_rate(double lr) {
  if (rate_owner_ != this) return rate_owner_->set_learning_rate(lr);
  // Where Keras 3's learning_rate setter raises: a schedule is never replaced by a rate.
  if (options_.schedule)
    throw TypeError(
        "This optimizer was created with a `LearningRateSchedule` object as its `learning_rate` constructor "
        "argument, hence its learning rate is not settable. If you need the learning rate to be settable, you "
        "should instantiate the optimizer with a float `learning_rate` argument.");
  check_finite_at_least(lr, 0, true, "learning_rate");
  options_.learning_rate = lr;
  // Every copy's block (this optimizer's, and a wrapper's that shares the rate) takes the new rule
  // before its next step, replayed or not (it is the block's, not a captured constant), and that
  // step derives its numbers by it. A step begun (an accumulation group's batches held back so
  // far) keeps the numbers it derived, replayed or eager: deriving them again would count the
  // step on the device (step_begin_).
  rate_version_.fetch_add(1);
}

void Optimizer::share_rate_of(Optimizer& owner) { rate_owner_ = owner.rate_owner_; }

bool Optimizer::built() const {
  const std::lock_guard<std::mutex> lock(slots_mu_);
  return step_.blocks.defined() || !slots_.empty() || iterations_.load() > 0;
}

std::int64_t Optimizer::iterations() const {
  catch_up_with_device();
  return iterations_.load();
}

void Optimizer::set_iterations(std::int64_t it) {
  LOCKSTEP_CHECK(it >= 0, "optimizer: iterations must be >= 0, got ", it);
  catch_up_with_device();  // replays' counts read before the host sets its own
  iterations_.store(it);
}

void Optimizer::block_state_changed() {
  const std::lock_guard<std::mutex> lock(slots_mu_);
  std::fill(step_.state_written.begin(), step_.state_written.end(), 0);
}

void Optimizer::catch_up_with_device() const {
  if (!device_ahead_.exchange(false)) return;
  Tensor block;
  {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    if (!step_.blocks.defined() || step_.blocks.num_copies() == 0) return;
    block = step_.blocks.copy(0);
  }
  const std::int64_t count = step_count(block);
  iterations_.store(count);
  {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    for (auto& c : step_.count)
      if (c >= 0) c = count;
  }
  read_block_state(block);
}

double Optimizer::current_learning_rate() const { return learning_rate_at(iterations_.load()); }

double Optimizer::learning_rate_at(std::int64_t step) const {
  const OptimizerOptions& o = options();
  return o.schedule ? o.schedule(step) : o.learning_rate;
}

const std::vector<Variable>& Optimizer::slot_variables(const Variable& var) {
  SlotVariables& entry = slots_[var.identity()];
  if (entry.slots.empty()) {
    entry.variable = var;
    for (const auto& n : slot_names()) entry.slots.push_back(Variable::zeros_like(var, var.name() + "/" + n));
  } else {
    for (auto& s : entry.slots) s.mirror_like(var);  // a no-op unless var was mirrored since
  }
  return entry.slots;
}

std::vector<Tensor> Optimizer::slots_of(const Variable& var) {
  if (slot_names().empty()) return {};
  std::lock_guard<std::mutex> lock(slots_mu_);
  const std::vector<Variable>& slots = slot_variables(var);
  std::vector<Tensor> out;
  out.reserve(slots.size());  // (as every vector of a step's update: one allocation, not one per doubling)
  for (const Variable& s : slots) out.push_back(s.value());
  return out;
}

std::vector<Tensor> Optimizer::Rule::shared_slots(const Variable& var) {
  if (o_.slot_names().empty()) return {};
  std::lock_guard<std::mutex> lock(o_.slots_mu_);
  std::vector<Tensor> out;
  for (const Variable& s : o_.slot_variables(var)) {
    // Every copy uses the primary from now on: each element is updated by its one owner.
    s.share_primary();
    out.push_back(s.copy(0));
  }
  return out;
}

void Optimizer::Rule::apply(const std::vector<Variable>& vars, const std::vector<GradientShard>& ranges,
                            std::int64_t step) {
  note_capture_refusal(o_.name(), o_.options().schedule);
  if (ranges.empty()) return;
  const Tensor block = o_.step_block(step, vars[ranges.front().variable]);
  const auto& clipvalue = o_.options().clipvalue;
  for (const GradientShard& s : ranges) {
    const Variable& v = vars[s.variable];
    const std::int64_t numel = v.value().numel();
    Tensor w = v.value().reshape({numel}).slice(s.begin, s.end);
    std::vector<Tensor> slots = shared_slots(v);
    for (Tensor& t : slots) t = t.reshape({numel}).slice(s.begin, s.end);
    // The replicas' gradients read where they lie: summed within the update where the rule can
    // (no clipvalue between the sum and the rule), else summed here first.
    if (s.grads.size() > 1 && !clipvalue && o_.update_rule_summed(w, slots, s.grads, s.copies, block)) continue;
    Tensor g = s.grads[0];
    if (s.grads.size() > 1) {
      g = Tensor::empty({s.end - s.begin});
      reduce_across(ReduceOp::kSum, s.grads, {g}, 0, g.numel());
    }
    const Tensor grad = clipvalue ? scale_and_clip(g, 1.0f, static_cast<float>(*clipvalue)) : g;
    o_.update_rule(w, slots, grad, block);
    for (Tensor c : s.copies) c.copy_from(w);  // handles on the other copies' memory
  }
}

void Optimizer::update_all(const std::vector<Variable>& vars, const std::vector<Tensor>& grads,
                           const Tensor& step_block) {
  std::vector<Tensor> ws;  // handles: the update writes the variables' own memory
  std::vector<std::vector<Tensor>> slots;
  ws.reserve(vars.size());
  slots.reserve(vars.size());
  for (const Variable& v : vars) {
    ws.push_back(v.value());
    slots.push_back(slots_of(v));
  }
  update_rule_all(ws, slots, grads, step_block);
}

void Optimizer::update_rule_all(std::vector<Tensor>& ws, std::vector<std::vector<Tensor>>& slots,
                                const std::vector<Tensor>& grads, const Tensor& step_block) {
  for (std::size_t i = 0; i < ws.size(); ++i) update_rule(ws[i], slots[i], grads[i], step_block);
}

namespace {
// Slot `s` of every variable (slots[i][s]), for the rules' multi-tensor updates.
std::vector<Tensor> slot_column(const std::vector<std::vector<Tensor>>& slots, std::size_t s) {
  std::vector<Tensor> out;
  out.reserve(slots.size());
  for (const auto& of : slots) out.push_back(of.at(s));
  return out;
}
}  // namespace

step_state::StepRule Optimizer::step_rule(std::int64_t step, std::int64_t& holds_for) const {
  step_state::StepRule r;
  holds_for = kRuleForEveryStep;
  const Schedule& schedule = options().schedule;
  if (const auto d = schedule ? schedules::describe(schedule) : std::nullopt) {
    r.schedule = *d;
  } else {
    r.schedule.initial = learning_rate_at(step);  // kConstant: the rate as the host computes it
    if (schedule) holds_for = step;  // a function of one's own: its rate of this step only
  }
  describe_step(r);
  return r;
}

std::size_t Optimizer::step_copy(const Variable& like) {
  if (!step_.blocks.defined()) step_.blocks = Variable::zeros_like(like, name() + "/step", Shape{step_state::kStepBlockFloats});
  else step_.blocks.mirror_like(like);  // a no-op unless like was mirrored since
  const auto n = static_cast<std::size_t>(step_.blocks.num_copies());
  if (step_.count.size() != n) {  // made (or mirrored): each copy's count is set before its first step
    step_.count.assign(n, -1);
    step_.derived_for.assign(n, -1);
    step_.made.assign(n, 1);
    step_.rule_for.assign(n, kRuleUnwritten);
    step_.rate_version.assign(n, 0);
    step_.state_written.assign(n, 0);
  }
  return this_copy(step_.blocks);
}

Tensor Optimizer::step_block(std::int64_t step, const Variable& like) {
  std::size_t r = 0;
  Tensor block;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);  // replicas make their blocks concurrently
    r = step_copy(like);
    block = step_.blocks.value();
    if (step_.derived_for[r] == step) return block;
  }
  // Only this replica's thread touches its entries from here.
  if (step_.count[r] != step) {
    // The host set the count (set_iterations, a checkpoint) or a custom loop gave its own step:
    // written by a kernel taking it as a host value, which a replay would repeat.
    if (StepCaptureCheck* check = current_step_capture_check(); check && !step_.made[r])
      check->block(detail::concat(name(), "'s step count set by the host within the step (to ", step, ")"));
    set_step_count_(block, step);
    step_.count[r] = step;
  }
  write_block_state_once(r, block, step);
  step_.made[r] = 0;
  step_begin_(block);
  step_.derived_for[r] = step;
  return block;
}

void Optimizer::end_step_block(std::int64_t step, bool applied) {
  std::size_t r = 0;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    if (!step_.blocks.defined()) return;
    r = this_copy(step_.blocks);
    if (r >= step_.derived_for.size() || step_.derived_for[r] != step) return;  // never begun
  }
  // No kernel: the next step_begin_ counts the step on the device unless the block marks it
  // skipped (a launch fewer per step); the host's count follows here.
  step_.count[r] = applied ? step + 1 : step;
  step_.derived_for[r] = -1;
}

void Optimizer::write_block_state_once(std::size_t r, Tensor& block, std::int64_t step) {
  const std::uint64_t version = rate_owner_->rate_version_.load();
  if ((step_.rule_for[r] != kRuleForEveryStep && step_.rule_for[r] != step) || step_.rate_version[r] != version) {
    std::int64_t holds_for = 0;
    set_step_rule_(block, step_rule(step, holds_for));
    step_.rule_for[r] = holds_for;
    step_.rate_version[r] = version;
  }
  if (step_.state_written[r]) return;
  write_block_state(block);
  step_.state_written[r] = 1;
}

void Optimizer::note_replayed_step(std::int64_t step, bool ended) {
  const std::lock_guard<std::mutex> lock(slots_mu_);
  if (!step_.blocks.defined()) return;
  const std::size_t r = this_copy(step_.blocks);
  if (r >= step_.count.size()) return;
  step_.made[r] = 0;
  if (!ended) {  // as step_block left it: begun for `step`
    step_.count[r] = step;
    step_.derived_for[r] = step;
    return;
  }
  step_.count[r] = step + 1;
  step_.derived_for[r] = -1;
  if (skips_on_device()) device_ahead_.store(true);
}

void Optimizer::note_discarded_step() {
  const std::lock_guard<std::mutex> lock(slots_mu_);
  if (!step_.blocks.defined()) return;
  const std::size_t r = this_copy(step_.blocks);
  if (r >= step_.count.size()) return;
  step_.count[r] = -1;  // unknown: the next step writes it from the host
  step_.derived_for[r] = -1;
  step_.made[r] = 0;
}

void Optimizer::set_step_count_before_replay(std::int64_t step, const Variable& like) {
  std::size_t r = 0;
  Tensor block;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    r = step_copy(like);
    block = step_.blocks.value();
  }
  // Only this replica's thread touches its entries from here.
  write_block_state_once(r, block, step);
  if (step_.count[r] == step) return;
  set_step_count_(block, step);
  step_.count[r] = step;
}

bool Optimizer::elementwise() const { return !options().clipnorm && !options().global_clipnorm; }

std::vector<std::pair<std::string, Tensor>> Optimizer::slots(const Variable& v) {
  std::vector<std::pair<std::string, Tensor>> out;
  const auto names = slot_names();
  const std::vector<Tensor> values = slots_of(v);
  for (std::size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], values[i]);
  return out;
}

void Optimizer::broadcast_slots(const Variable& v) {
  if (slot_names().empty()) return;
  std::lock_guard<std::mutex> lock(slots_mu_);
  for (const Variable& s : slot_variables(v)) s.broadcast_primary();
}

void Optimizer::apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) {
  // Inside strategy.run, as TF's merge_call: the gradients are summed over the replicas first,
  // then every replica applies the same update to its own copies.
  ReplicaInterface* replica = current_replica();
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  for (const auto& [g, v] : grads_and_vars) {
    if (!g.defined()) continue;  // skipped; every replica must skip the same ones
    check_made_in_scope(v, name() + ".apply_gradients", /*for_update=*/true);
    grads.push_back(g);
    vars.push_back(v);
  }
  // Read the step before the all-reduce: no replica can finish the all-reduce (and so count the
  // step) before every replica has read it.
  const std::int64_t step = iterations_.load();
  // Under no_sync (gradient accumulation) the gradients are only held back: no update, no step.
  if (apply_gradients_in_replica(replica, grads, vars, step) != StepOutcome::kApplied) return;
  // The step counts once: the first replica to get here moves it from `step` to `step + 1`, the
  // others find it moved. No replica can read it for the next step before its own exchange, and
  // none can count step + 1 without it, so every replica's next read is exactly step + 1.
  std::int64_t expected = step;
  iterations_.compare_exchange_strong(expected, step + 1);
}

Optimizer::StepOutcome Optimizer::apply_gradients_in_replica(ReplicaInterface* replica, std::vector<Tensor>& grads,
                                                             const std::vector<Variable>& vars, std::int64_t step) {
  // Every replica derives the step's numbers on its block first, whatever share of the update
  // falls to it (a sharded update may give it none).
  if (!vars.empty()) (void)step_block(step, vars.front());
  const StepOutcome done = exchange_and_apply(replica, grads, vars, step);
  // The block's count counts the applied step (a held-back or skipped one does not, as Keras);
  // a skipped step ends too, so that the next one begins afresh (its skipped mark cleared).
  if (done != StepOutcome::kHeldBack) end_step_block(step, done == StepOutcome::kApplied);
  return done;
}

Optimizer::StepOutcome Optimizer::exchange_and_apply(ReplicaInterface* replica, std::vector<Tensor>& grads,
                                                     const std::vector<Variable>& vars, std::int64_t step) {
  if (replica) {
    switch (replica->exchange_gradients(grads, vars, elementwise_rule(), step)) {
      case GradientsExchanged::kHeldBack: return StepOutcome::kHeldBack;
      case GradientsExchanged::kApplied: return StepOutcome::kApplied;
      case GradientsExchanged::kSummed: break;
    }
  }
  if (Tensor block = vars.empty() ? Tensor() : step_block(step, vars.front()); !usable(grads, block))
    return StepOutcome::kSkipped;
  apply_gradients_at(zip_pairs(grads, vars), step);
  return StepOutcome::kApplied;
}

void Optimizer::apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  LOCKSTEP_CHECK(grads.size() == vars.size(), name(), ".apply_gradients: ", grads.size(), " gradients for ",
                 vars.size(), " variables");
  apply_gradients(zip_pairs(grads, vars));
}

void Optimizer::apply_gradients_at(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                   std::int64_t step) {
  {
    // After a sharded update the copies share copy 0's slots (over several workers, each holds
    // only its shards of them): every replica refuses before any of them updates anything, so
    // the copies stay alike.
    std::lock_guard<std::mutex> lock(slots_mu_);
    for (const auto& [g, v] : grads_and_vars) {
      const auto it = slots_.find(v.identity());
      const bool shared = it != slots_.end() && !it->second.slots.empty() && it->second.slots[0].shares_primary();
      LOCKSTEP_CHECK(!(g.defined() && shared),
                     name(), ": the slots of variable '", v.name(), "' were last updated sharded over the replicas "
                     "(MirroredOptions::shard_optimizer_update) and only its first copy holds them (over several "
                     "workers, only this worker's shards of them); call model.gather_optimizer_slots() on every "
                     "worker if the replicas span several, then optimizer.broadcast_slots(variable) for every "
                     "variable, before updating it unsharded");
    }
  }
  // Clipping by norm on the device: the squared norms summed by kernels (the global one at 0,
  // each gradient's own after it), the factor derived where they are. Nothing is read back.
  const OptimizerOptions& o = options();
  const clip_math::NormClip clip{.global_clipnorm = o.global_clipnorm.value_or(0),
                                 .clipnorm = o.clipnorm.value_or(0),
                                 .clipvalue = o.clipvalue ? static_cast<float>(*o.clipvalue) : INFINITY};
  Tensor sums;
  if (clip.global_clipnorm > 0 || clip.clipnorm > 0) {
    sums = norm_sums(1 + static_cast<std::int64_t>(grads_and_vars.size()));
    for (std::size_t i = 0; i < grads_and_vars.size(); ++i) {
      const Tensor& g = grads_and_vars[i].first;
      if (!g.defined()) continue;
      if (clip.global_clipnorm > 0) add_sum_squares_(g, sums, 0);
      if (clip.clipnorm > 0) add_sum_squares_(g, sums, 1 + static_cast<std::int64_t>(i));
    }
  }
  note_capture_refusal(name(), o.schedule);
  std::vector<Variable> vars;
  std::vector<Tensor> grads;
  vars.reserve(grads_and_vars.size());
  grads.reserve(grads_and_vars.size());
  for (std::size_t i = 0; i < grads_and_vars.size(); ++i) {
    const auto& [g, v] = grads_and_vars[i];
    if (!g.defined()) continue;
    LOCKSTEP_CHECK(g.shape() == v.shape(), name(), ": gradient ", g.shape().str(), " does not match variable '",
                   v.name(), "' ", v.shape().str());
    Tensor grad = g;
    if (sums.defined()) grad = clip_by_norms(g, clip, sums, 1 + static_cast<std::int64_t>(i));
    else if (o.clipvalue) grad = scale_and_clip(g, 1.0f, clip.clipvalue);
    vars.push_back(v);
    grads.push_back(grad);
  }
  if (!vars.empty()) update_all(vars, grads, step_block(step, vars.front()));
}

namespace {

class SGDImpl final : public Optimizer {
 public:
  explicit SGDImpl(const SGDOptions& o) : Optimizer(o), momentum_(o.momentum), nesterov_(o.nesterov) {
    LOCKSTEP_CHECK(o.momentum >= 0 && o.momentum <= 1, "SGD: momentum must be in [0, 1], got ", o.momentum);
  }
  std::string name() const override { return "SGD"; }
  std::map<std::string, double> hyperparameters() const override {
    return {{"momentum", momentum_}, {"nesterov", nesterov_ ? 1.0 : 0.0}};
  }

 protected:
  std::vector<std::string> slot_names() const override {
    return momentum_ > 0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
  }
  void update_rule(Tensor& w, std::vector<Tensor>& slots, const Tensor& g, const Tensor& step) override {
    Tensor m = momentum_ > 0 ? slots[0] : Tensor();
    sgd_update_(w, m, g, step, static_cast<float>(momentum_), nesterov_);
  }
  bool update_rule_summed(Tensor& w, std::vector<Tensor>& slots, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& copies, const Tensor& step) override {
    Tensor m = momentum_ > 0 ? slots[0] : Tensor();
    sgd_update_(w, m, grads, copies, step, static_cast<float>(momentum_), nesterov_);
    return true;
  }
  void update_rule_all(std::vector<Tensor>& ws, std::vector<std::vector<Tensor>>& slots,
                       const std::vector<Tensor>& grads, const Tensor& step) override {
    std::vector<Tensor> ms = momentum_ > 0 ? slot_column(slots, 0) : std::vector<Tensor>{};
    sgd_update_all_(ws, ms, grads, step, static_cast<float>(momentum_), nesterov_);
  }

 private:
  double momentum_;
  bool nesterov_;
};

class AdamImpl : public Optimizer {
 public:
  AdamImpl(const AdamOptions& o, double weight_decay)
      : Optimizer(o), b1_(o.beta_1), b2_(o.beta_2), eps_(o.epsilon), wd_(weight_decay) {
    LOCKSTEP_CHECK(o.beta_1 >= 0 && o.beta_1 < 1 && o.beta_2 >= 0 && o.beta_2 < 1,
                   "Adam: beta_1 and beta_2 must be in [0, 1), got ", o.beta_1, " and ", o.beta_2);
    check_finite_at_least(o.epsilon, 0, true, "epsilon");
  }
  std::string name() const override { return wd_ > 0 ? "AdamW" : "Adam"; }
  std::map<std::string, double> hyperparameters() const override {
    std::map<std::string, double> h{{"beta_1", b1_}, {"beta_2", b2_}, {"epsilon", eps_}};
    if (wd_ > 0) h["weight_decay"] = wd_;
    return h;
  }

 protected:
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  void update_rule(Tensor& w, std::vector<Tensor>& slots, const Tensor& g, const Tensor& step) override {
    adam_update_(w, slots[0], slots[1], g, step, betas());
  }
  bool update_rule_summed(Tensor& w, std::vector<Tensor>& slots, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& copies, const Tensor& step) override {
    adam_update_(w, slots[0], slots[1], grads, copies, step, betas());
    return true;
  }
  void update_rule_all(std::vector<Tensor>& ws, std::vector<std::vector<Tensor>>& slots,
                       const std::vector<Tensor>& grads, const Tensor& step) override {
    std::vector<Tensor> ms = slot_column(slots, 0), vs = slot_column(slots, 1);
    adam_update_all_(ws, ms, vs, grads, step, betas());
  }
  // The step's alpha (lr sqrt(1 - b2^t) / (1 - b1^t)) and decay are derived from these on the
  // device (step_state::derive_step_scalars, Keras' float32 roundings).
  void describe_step(step_state::StepRule& r) const override {
    r.kind = step_state::RuleKind::kAdam;
    r.beta_1 = b1_;
    r.beta_2 = b2_;
    r.weight_decay = wd_;
  }

 private:
  AdamBetas betas() const {
    return {.one_minus_beta_1 = static_cast<float>(1.0 - b1_),
            .one_minus_beta_2 = static_cast<float>(1.0 - b2_),
            .epsilon = static_cast<float>(eps_)};
  }

  double b1_, b2_, eps_, wd_;
};

// Keras 3's RMSprop (keras/src/optimizers/rmsprop.py): the rule is the rmsprop_update kernel's;
// the step's learning rate is the block's, as SGD's (no bias correction: SGD's step description).
class RMSpropImpl final : public Optimizer {
 public:
  explicit RMSpropImpl(const RMSpropOptions& o)
      : Optimizer(o), rho_(o.rho), momentum_(o.momentum), eps_(o.epsilon), centered_(o.centered) {
    LOCKSTEP_CHECK(std::isfinite(o.rho) && o.rho >= 0 && o.rho <= 1, "RMSprop: rho must be in [0, 1], got ", o.rho);
    LOCKSTEP_CHECK(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum <= 1,
                   "RMSprop: momentum must be in [0, 1], got ", o.momentum);
    check_finite_at_least(o.epsilon, 0, true, "epsilon");
  }
  std::string name() const override { return "RMSprop"; }
  std::map<std::string, double> hyperparameters() const override {
    return {{"rho", rho_}, {"momentum", momentum_}, {"epsilon", eps_}, {"centered", centered_ ? 1.0 : 0.0}};
  }

 protected:
  // Keras' variable names, in its order of making them (build()).
  std::vector<std::string> slot_names() const override {
    std::vector<std::string> names{"velocity"};
    if (momentum_ > 0) names.emplace_back("momentum");
    if (centered_) names.emplace_back("average_gradient");
    return names;
  }
  // Keras' build() adds the velocities of every variable, then the momentums, then the averages.
  bool keras_slots_by_variable() const override { return false; }
  void update_rule(Tensor& w, std::vector<Tensor>& slots, const Tensor& g, const Tensor& step) override {
    Tensor none;
    std::size_t next = 1;
    Tensor& momentum = momentum_ > 0 ? slots.at(next++) : none;
    Tensor& average = centered_ ? slots.at(next) : none;
    rmsprop_update_(w, slots.at(0), momentum, average, g, step, constants());
  }
  void update_rule_all(std::vector<Tensor>& ws, std::vector<std::vector<Tensor>>& slots,
                       const std::vector<Tensor>& grads, const Tensor& step) override {
    std::size_t next = 1;
    std::vector<Tensor> velocities = slot_column(slots, 0);
    std::vector<Tensor> momentums = momentum_ > 0 ? slot_column(slots, next++) : std::vector<Tensor>{};
    std::vector<Tensor> averages = centered_ ? slot_column(slots, next) : std::vector<Tensor>{};
    rmsprop_update_all_(ws, velocities, momentums, averages, grads, step, constants());
  }

 private:
  // Keras' float32 forms: rho and epsilon cast from their Python floats, 1 - rho computed in
  // double first (Python's) and then cast.
  RmspropConstants constants() const {
    return {.rho = static_cast<float>(rho_),
            .one_minus_rho = static_cast<float>(1.0 - rho_),
            .epsilon = static_cast<float>(eps_),
            .momentum = static_cast<float>(momentum_)};
  }

  double rho_, momentum_, eps_;
  bool centered_;
};

}  // namespace

OptimizerPtr RMSprop(double lr) {
  RMSpropOptions o;
  o.learning_rate = lr;
  return RMSprop(o);
}
OptimizerPtr RMSprop(const RMSpropOptions& o) { return std::make_shared<RMSpropImpl>(o); }

OptimizerPtr SGD(double lr, double momentum, bool nesterov) {
  SGDOptions o;
  o.learning_rate = lr;
  o.momentum = momentum;
  o.nesterov = nesterov;
  return SGD(o);
}
OptimizerPtr SGD(const SGDOptions& o) { return std::make_shared<SGDImpl>(o); }
OptimizerPtr Adam(double lr) {
  AdamOptions o;
  o.learning_rate = lr;
  return Adam(o);
}
OptimizerPtr Adam(const AdamOptions& o) { return std::make_shared<AdamImpl>(o, 0.0); }
OptimizerPtr AdamW(double lr, double wd) {
  AdamWOptions o;
  o.learning_rate = lr;
  o.weight_decay = wd;
  return AdamW(o);
}
OptimizerPtr AdamW(const AdamWOptions& o) {
  check_finite_at_least(o.weight_decay, 0, true, "weight_decay");
  return std::make_shared<AdamImpl>(o, o.weight_decay);
}

OptimizerPtr get(const std::string& name, double lr) {
  if (name == "sgd" || name == "SGD") return SGD(lr);
  if (name == "adam" || name == "Adam") return Adam(lr);
  if (name == "adamw" || name == "AdamW") return AdamW(lr);
  if (name == "rmsprop" || name == "RMSprop") return RMSprop(lr);
  throw ValueError("unknown optimizer '" + name + "': expected sgd, adam, adamw or rmsprop");
}

}  // namespace lockstep::optimizers

namespace lockstep::optimizers {
OptimizerPtr get(const std::string& name, Schedule schedule) {
  LOCKSTEP_CHECK(static_cast<bool>(schedule), "optimizers::get: the schedule is empty");
  const double first = schedule(0);
  OptimizerOptions base;
  base.learning_rate = std::isfinite(first) && first >= 0 ? first : 0.0;
  base.schedule = std::move(schedule);
  if (name == "sgd" || name == "SGD") {
    SGDOptions o;
    static_cast<OptimizerOptions&>(o) = base;
    return SGD(o);
  }
  if (name == "rmsprop" || name == "RMSprop") {
    RMSpropOptions o;
    static_cast<OptimizerOptions&>(o) = base;
    return RMSprop(o);
  }
  AdamWOptions o;
  static_cast<OptimizerOptions&>(o) = base;
  if (name == "adam" || name == "Adam") return Adam(static_cast<const AdamOptions&>(o));
  if (name == "adamw" || name == "AdamW") return AdamW(o);
  throw ValueError("unknown optimizer '" + name + "': expected sgd, adam, adamw or rmsprop");
}
}  // namespace lockstep::optimizers
