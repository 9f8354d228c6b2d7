// A model's train step: each replica's forward, loss, gradients and update on its slice
// (replica_train_step), and one step of the replicas through jit_compile's StepJit
// (train_micro_step).
#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"
#include "lockstep/tensor/ops_loss_scale.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "lockstep/training/model.hpp"
#include "distribute/phase_times.hpp"
#include "training/replica_slices.hpp"
#include "training/sample_weights.hpp"
#include "training/step_jit.hpp"

namespace lockstep {
namespace phase_times = distribute::phase_times;
namespace {
using detail::ReplicaNumbers;
using detail::run_on_slices;
using Outcome = optimizers::Optimizer::StepOutcome;

void check_same_rows(const Tensor& x, const Tensor& y) {
  LOCKSTEP_CHECK(x.rank() >= 1 && y.rank() >= 1 && y.dim(0) == x.dim(0), "train_step: x ", x.shape().str(), " and y ",
                 y.shape().str(), " have different batch sizes");
}

// Whether every output's per-example losses are float32 (what loss_seed seeds); `r`: the step's
// numbers, whose several_outputs() says which of outs' losses the model has.
bool float32_losses(const detail::SliceOutputs& outs, const detail::ReplicaNumbers& r) {
  if (!r.several_outputs()) return outs.losses.dtype() == DType::kF32;
  return std::all_of(outs.many_losses.begin(), outs.many_losses.end(),
                     [](const Tensor& l) { return l.dtype() == DType::kF32; });
}

// How a step seeds its loss gradient: the step block whose loss scale gives the factor on the
// device (undefined: `factor`, the host's), and the global batch's inverse size.
struct OutputSeed {
  Tensor block;
  double inverse_n = 0.0;
  float factor = 1.0f;
};

// Where the backward starts for one output's per-example `losses` (`sum` their sum, `weight` the
// output's in the total) and its output gradient there. Float32 losses: the losses, seeded in one
// kernel (loss_seed) with the bits of their sum, weighted and scaled by the factor,
// differentiated (sum's, scale's and the total's backward folded in); another dtype: the sum
// scaled by factor * weight, from a seed of ones.
void seed_output(const Tensor& losses, const Tensor& sum, float weight, const OutputSeed& how, Tensor& root,
                 Tensor& seed) {
  if (losses.dtype() == DType::kF32) {
    root = losses;
    seed = loss_seed(losses, how.block, how.inverse_n, how.factor, weight);
  } else {
    root = scale(sum, how.factor * weight);
  }
}
}  // namespace

void Model::slice_loss(const data::Element& s, const layers::CallContext& ctx, detail::SliceOutputs& outs,
                       ReplicaNumbers& r) const {
  const std::size_t n_in = inputs_.size();
  if (n_in == 1 && outputs_.size() == 1) {  // the path every Sequential takes
    outs.one = forward(input_of(s[0]), ctx);
    outs.losses = detail::output_losses(*loss_, s[1], outs.one, sample_weight_of(s, 0));
    r.loss_sum = sum(outs.losses);
    return;
  }
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < n_in; ++i) xs.push_back(input_of(s[i]));
  outs.many = forward_all(xs, ctx);
  for (std::size_t k = 0; k < outs.many.size(); ++k) {
    Output& o = outs.many[k];
    const Tensor& y = s[n_in + k];
    const std::string& out = outputs_.names[k];
    const Tensor& pred = o.output.defined() ? o.output : o.logits;  // the logits have the output's shape
    LOCKSTEP_CHECK(y.rank() >= 1 && y.dim(0) == pred.dim(0), "model '", name(), "': the target of output '", out,
                   "' ", y.shape().str(), " does not have the batch size of the output ", pred.shape().str());
    const losses::Loss& loss = output_losses_.empty() ? *loss_ : *output_losses_[k].loss;
    Tensor losses;
    try {
      losses = detail::output_losses(loss, y, o, sample_weight_of(s, k));
    } catch (const ValueError& e) {
      throw ValueError("model '" + name() + "', output '" + out + "': " + e.what());
    }
    if (output_losses_.empty()) {  // several inputs, one output
      outs.losses = losses;
      r.loss_sum = sum(losses);
      return;
    }
    // Each output's sum alone: the weighted total is formed from them where they are read
    // (merge_read_numbers), and the backward starts at the per-example losses, so no kernel
    // weights or adds them here.
    r.output_loss_sums.push_back(sum(losses));
    outs.many_losses.push_back(std::move(losses));
  }
}

void Model::slice_metric_states(const data::Element& s, const detail::SliceOutputs& outs, ReplicaNumbers& r) const {
  const std::size_t n_in = inputs_.size();
  // A metric's weights depend only on its output and on which of its sample weights and mask it
  // reads: made once per such kind in a step, not once per metric; none made (and nothing
  // allocated) where a metric reads neither, the common step.
  std::map<std::tuple<std::size_t, bool, bool>, Tensor> weights;
  for (const CompiledMetric& m : metrics_) {
    const std::size_t k = m.output;
    const Tensor weight = m.weighted ? sample_weight_of(s, k) : Tensor();
    const Tensor mask = m.metric->applies_masks() ? outs[k].mask : Tensor();
    Tensor w;
    if (weight.defined() || mask.defined()) {
      auto [it, made] = weights.try_emplace({k, weight.defined(), mask.defined()});
      if (made) it->second = metrics::mask_weights(weight, mask);
      w = it->second;
    }
    r.metric_states.push_back(m.metric->weighted_batch_state(s[n_in + k], outs[k].output, w));
  }
}

detail::ReplicaNumbers Model::replica_train_step(const data::Element& s, std::int64_t first_example,
                                        std::int64_t global_n, std::int64_t step, ReplicaInterface* replica,
                                        GradientUse use) {
  const std::vector<Variable>& vars = step_trainable_;  // each replica resolves them to its own copies
  // Dropout reads the step on the device, from this replica's step block (the update's, holding
  // `step`): the step's launches are then the same every step.
  const Tensor step_block = vars.empty() ? Tensor() : optimizer_->step_block(step, vars.front());
  const layers::CallContext ctx{.training = true,
                                .seed = seed_,
                                .step = static_cast<std::uint64_t>(step),
                                .first_example = first_example,
                                .replica = replica,
                                .step_block = step_block,
                                .softmax_to_loss = true};
  const auto* loss_scale = dynamic_cast<const optimizers::LossScaleOptimizer*>(optimizer_.get());
  detail::SliceOutputs outs;
  ReplicaNumbers r;
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    {
      const phase_times::Scope timed(phase_times::Phase::kForward,
                                     replica ? replica->replica_id_in_sync_group() : -1);
      slice_loss(s, ctx, outs, r);
    }
    const phase_times::Scope timed(phase_times::Phase::kBackward);
    // Every replica divides by the GLOBAL batch size, so the summed gradients are the mean
    // over the global batch whatever the split: N replicas compute what one device would.
    // Under a loss scale the factor is the block's (its scale on the device: the output gradient
    // of the summed loss, the bits of the loss scaled by it), so that the step reads nothing.
    const double inverse_n = global_n ? 1.0 / static_cast<double>(global_n) : 0.0;
    const bool on_device = loss_scale && step_block.defined() && float32_losses(outs, r);
    const float factor =
        loss_scale_math::loss_factor(inverse_n, loss_scale && !on_device ? loss_scale->loss_scale() : 1.0);
    // Each gradient bucket's exchange starts as soon as the backward pass has made its last
    // gradient final, while the pass goes on (not when gradients are accumulated first).
    const GradientReadyFn on_ready =
        replica && use == GradientUse::kApply
            ? replica->begin_gradient_exchange(vars, optimizer_->elementwise_rule())
            : GradientReadyFn();
    // The backward starts at each output's per-example losses, seeded in one kernel each.
    const OutputSeed how{.block = on_device ? step_block : Tensor(), .inverse_n = inverse_n, .factor = factor};
    if (!r.several_outputs()) {
      Tensor root, seed;
      seed_output(outs.losses, r.loss_sum, 1.0f, how, root, seed);
      grads = tape.gradient(root, vars, seed, on_ready);
    } else {  // several outputs: each seeded with its weight, so no op adds their losses up
      const std::size_t n_out = outs.many_losses.size();
      std::vector<Tensor> roots(n_out), seeds(n_out);
      for (std::size_t k = 0; k < n_out; ++k)
        seed_output(outs.many_losses[k], r.output_loss_sums[k], static_cast<float>(output_losses_[k].weight), how,
                    roots[k], seeds[k]);
      grads = tape.gradient(roots, vars, seeds, on_ready);
    }
  }
  const phase_times::Scope timed(phase_times::Phase::kUpdate);  // metrics and the update
  slice_metric_states(s, outs, r);
  if (!replica) {  // one device: the group's sums are the model's
    if (use == GradientUse::kHoldBack) {
      fit_sums_.add(grads, vars);
      return r;
    }
    if (!fit_sums_.empty()) grads = fit_sums_.take(grads, vars);
  }
  // Summed over the replicas (or held back under no_sync), checked, and applied, sharded over
  // the replicas where the strategy allows. The sums are identical on every replica, so every
  // replica makes the same decision about a loss-scaled step's finiteness.
  const auto apply = [&] { return optimizer_->apply_gradients_in_replica(replica, grads, vars, step); };
  Outcome done;
  if (replica) {
    const auto quiet = dynamic_cast<distribute::ReplicaContext&>(*replica).no_sync(use == GradientUse::kHoldBack);
    done = apply();
  } else {
    done = apply();
  }
  if (loss_scale && done != Outcome::kHeldBack) loss_scale->update_scale_in_block(step_block);
  r.gradients_finite = done != Outcome::kSkipped;
  return r;
}

double Model::train_step(const Tensor& x, const Tensor& y) {
  check_compiled("train_step");
  check_same_rows(x, y);
  check_components(2, "train_step");
  // The step's numbers are merged from the model's PendingNumbers, which takes them as they are
  // and keeps the merge's memory for the next call (a PendingNumbers of the call's own, copying
  // each replica's numbers in, cost the bare step six heap allocations, issue 37).
  if (!step_numbers_) step_numbers_ = std::make_shared<detail::PendingNumbers>();
  detail::PendingNumbers& numbers = *step_numbers_;
  numbers.steps.clear();  // (a step that threw left its numbers)
  train_micro_step(detail::split_batch(strategy_, {x, y}), 0, x.rank() >= 1 ? x.dim(0) : 0, GradientUse::kApply,
                   &numbers);
  return merge_numbers(numbers);
}

double Model::train_micro_step(const distribute::DistributedBatch& batch, std::int64_t first_example,
                               std::int64_t group_examples, GradientUse use, detail::PendingNumbers* pending) {
  check_compiled("train_step");
  // Tensors are checked here; a batch of rows comes from one table of rows, so its components
  // agree. Each replica casts its own slice (on its device, after the copy: fewer bytes).
  if (const data::Element* t = batch.global->tensors())
    for (std::size_t i = 1; i < t->size(); ++i) check_same_rows((*t)[0], (*t)[i]);
  if (!built()) build(batch.global->shape(0));
  check_trainable_as_compiled();
  ensure_mirrored();
  const std::int64_t n = batch.global_size;
  const std::int64_t step = optimizer_->host_iterations();  // no read: the device counts skipped replays
  const std::vector<Variable>& vars = step_trainable_;  // ensure_mirrored refreshed them
  // Every batch of an accumulation group is replayed: its place in the group (the key) says what
  // it does with the sums, which live where every replay finds them (GradientAccumulator), and
  // their host state is set after the step as its place says (a replay skips that code). A
  // batch held back runs eagerly, unsaid, until the sums have memory (a capture makes none that
  // outlives it). Sums held before a group's first batch are a custom loop's (no_sync): which of
  // them are held is no part of the key, so a step adding them runs eagerly.
  distribute::GradientAccumulator& sums = group_sums();
  const bool accumulating = use == GradientUse::kHoldBack || first_example > 0;
  const detail::StepTerms terms{
      .whole = use == GradientUse::kApply,
      .replayable = use == GradientUse::kApply || sums.has_memory_for(vars),
      .eager = first_example == 0 && !sums.empty()
                   ? "a step adding gradients that a custom loop held back under no_sync is not replayed (which "
                     "sums are held is no part of its input signature)"
                   : "",
      .key = {first_example, group_examples, use == GradientUse::kApply},
      .optimizer = vars.empty() ? nullptr : optimizer_.get(),
      .step = step,
      .like = vars.empty() ? Variable() : vars.front()};
  const auto train = [&](const data::Element& s, std::int64_t first, ReplicaInterface* rc) {
    return replica_train_step(s, first_example + first, group_examples, step, rc, use);
  };
  const auto settle = [&](const distribute::PerReplica<ReplicaNumbers>& parts) {
    if (use == GradientUse::kHoldBack) return;
    const bool applied = parts[0].gradients_finite;
    if (auto* loss_scale = dynamic_cast<optimizers::LossScaleOptimizer*>(optimizer_.get()))
      loss_scale->follow_block_update(applied);  // the blocks moved their scales themselves
    if (applied) optimizer_->finish_step();
  };
  auto parts = step_jit(StepFunction::kTrain)->step(strategy_, batch, jit_compile_, name(), terms, train, settle);
  if (accumulating) sums.note_step(vars, use == GradientUse::kHoldBack);
  // Losses and metrics are reduced across replicas before anyone sees them: now, or with the
  // execution's other steps (`pending`).
  const auto merge = [&] {
    if (pending) {
      pending->steps.push_back({std::move(parts), n});
      return 0.0;
    }
    double batch_loss = 0;
    merge_replica_numbers(parts, n, &batch_loss);
    return batch_loss;
  };
  if (use == GradientUse::kHoldBack) return merge();
  // Debug check (MirroredOptions::check_mirrored): every replica's copy of every variable is
  // still bit-identical after the update; throws DistributedError naming the first that drifted.
  if (strategy_ && strategy_->checks_mirrored_each_step()) strategy_->check_mirrored(variables());
  return merge();
}

}  // namespace lockstep
