#pragma once
// Model: Keras' compile / fit / evaluate / predict. A subclass says how to build itself and
// how to run forward; Sequential and Functional are the two.
#include <atomic>
#include <concepts>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/data/dataset.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/layers/layer.hpp"
#include "lockstep/losses/loss.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/optimizers/optimizer.hpp"
#include "lockstep/training/callback.hpp"
#include "lockstep/training/jit_compile.hpp"
#include "lockstep/training/structure.hpp"

namespace lockstep {

namespace detail {
struct ReplicaNumbers;  // replica_slices.hpp: one replica's loss sum and metric states
struct SliceOutputs;    // replica_slices.hpp: one replica's outputs
class FitLoop;         // fit_loop.hpp: the parts of fit
struct PendingNumbers;  // replica_slices.hpp: the numbers of an execution's steps, merged at its end
class StepJit;          // step_jit.hpp: jit_compile for the train, test and predict steps
}

struct FitOptions {
  int epochs = 1;
  /// Steps per epoch; -1: until the dataset is exhausted (a new pass each epoch). When set, one
  /// iterator runs across epochs (use repeat()); running dry ends training with a warning.
  std::int64_t steps_per_epoch = -1;
  /// Batch size for fit(x, y) on in-memory tensors (ignored for datasets, which are batched).
  std::int64_t batch_size = 32;
  std::optional<data::Dataset> validation_data;
  /// Fraction of (x, y) held out for validation, taken from the end before shuffling (Keras).
  double validation_split = 0.0;
  std::int64_t validation_steps = -1;
  /// Shuffle (x, y) each epoch (fit on tensors only).
  bool shuffle = true;
  int initial_epoch = 0;
  /// 0 silent, 1 progress bar, 2 one line per epoch; -1 chooses 1 on a terminal, 2 otherwise.
  int verbose = -1;
  std::vector<CallbackPtr> callbacks;
  /// Gradient accumulation: the gradients of k consecutive batches are summed (no collective
  /// in between) and applied as one update, all-reduced once: k batches of B train as one
  /// batch of k x B would. Callbacks, logs and steps_per_epoch still count batches; the
  /// optimizer (and so any schedule) counts updates. A group never spans two epochs: the
  /// last one of an epoch may be shorter.
  int gradient_accumulation_steps = 1;
  /// On CPUs, where the replicas gather their own slices of each batch, they gather the next
  /// batch's slices ahead while a step runs; false gathers each when its step starts (for
  /// comparisons: the same bits either way). On GPUs the input worker gathers the next batch's
  /// slices (off the replicas' threads) for the copy ahead; false: each replica gathers them.
  bool gather_ahead = true;
  /// On GPUs the rows of each batch are gathered straight into the pinned staging memory that
  /// their copy to the device reads; false gathers them into host memory first (one more copy;
  /// for comparisons: the same bits either way).
  bool gather_into_staging = true;
  /// On GPUs the next batch is copied to the replicas' devices while a step runs (TF's
  /// experimental_fetch_to_device); false copies each when its step starts (for comparisons:
  /// the same bits either way).
  bool prefetch_to_device = true;
  /// When every callback is async_safe (Callback::async_safe), the numbers of several steps
  /// (losses, metric states) are read from the devices together, so the host does not wait for
  /// each step; false reads each execution's at its end (for comparisons: the same logs, History
  /// and weights either way). LOCKSTEP_SYNC_EACH_STEP=1 sets it false for every fit.
  bool defer_reads = true;
  /// Keras' sample_weight, for fit on tensors: one weight per example (shape (N,) or (N, 1), read
  /// as float32; sample_weights.hpp), which multiplies that example's loss. A model of several
  /// outputs weighs every output's loss by it. A dataset carries its weights itself, as the
  /// component after the targets ((x, y, sample_weight), as Keras): setting this with a dataset
  /// is a ValueError. Undefined: every example weighs 1.
  Tensor sample_weight;
  /// Keras' sample_weight as a list or dict for a model of several outputs: one weight array per
  /// output (output_structure()'s order), each as sample_weight, weighing that output's loss and
  /// weighted metrics. In place of sample_weight (both: ValueError); empty: none.
  std::vector<Tensor> sample_weights;
  /// Keras' class_weight: each example weighs its class's weight (classes absent weigh 1), its
  /// class the integer target, or the argmax of a one-hot one. With tensors or a dataset; not with
  /// sample_weight, weights in the dataset, or a model of several outputs (ValueError, Keras' words).
  std::map<int, double> class_weight;
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;
  std::int64_t steps = -1;
  int verbose = 0;
  std::vector<CallbackPtr> callbacks;
  /// Keras' sample_weight for evaluate on tensors, as FitOptions::sample_weight and sample_weights.
  Tensor sample_weight;
  std::vector<Tensor> sample_weights;
};

struct PredictOptions {
  std::int64_t batch_size = 32;
  std::int64_t steps = -1;
  std::vector<CallbackPtr> callbacks;
};

/// Training throughput of the last fit(), measured after the first 5% of steps.
struct FitTiming {
  std::int64_t steps = 0;
  double seconds = 0;
  double steps_per_second = 0;
};

class Model {
 public:
  explicit Model(std::string name = "model");
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return name_; }

  /// Inside a strategy's scope, the model must have been made in that scope (or distributed
  /// to it with distribute()); otherwise ValueError with Keras' message and the fix.
  /// Under the mixed_float16 policy the optimizer is wrapped in a LossScaleOptimizer unless
  /// auto_scale_loss is false (Keras' compile argument); the epoch logs then carry
  /// "loss_scale" and "skipped_steps".
  void compile(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, std::vector<std::string> metrics = {},
               bool auto_scale_loss = true);
  /// One of compile's metrics as Keras takes them (Python's lists mix the two): a name, made by
  /// its output's loss as metrics::get makes it ("accuracy" by the loss), or a metric object.
  using MetricArg = std::variant<std::string, metrics::MetricPtr>;
  /// Keras' compile(metrics=[keras.metrics.X(name=...)]): metric objects (or MetricArgs), logged
  /// under their names (names must differ from each other and from "loss"). A template only so
  /// that `{}` and `{"accuracy"}` still mean names.
  template <typename M>
    requires std::same_as<M, metrics::MetricPtr> || std::same_as<M, MetricArg>
  void compile(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, std::vector<M> metrics,
               bool auto_scale_loss = true) {
    compile_metrics(std::move(optimizer), std::move(loss), metric_args(std::move(metrics)), auto_scale_loss);
  }
  void compile(const std::string& optimizer, const std::string& loss, std::vector<std::string> metrics = {});
  /// A model of several outputs (Keras' compile(loss={"cls": ..., "reg": ...}, loss_weights=...,
  /// metrics={"cls": ["accuracy"]})), by output name (output_structure()). A loss under every
  /// output's name, or one under "" for every output (Keras' one loss); weights default to 1.
  /// The logs are "loss" (the weighted sum), "<output>_loss" and "<output>_<metric>".
  /// ValueError naming an output without a loss, or a name that is no output.
  void compile(optimizers::OptimizerPtr optimizer, const std::map<std::string, losses::LossPtr>& losses,
               const std::map<std::string, std::vector<std::string>>& metrics,
               const std::map<std::string, double>& loss_weights = {}, bool auto_scale_loss = true);
  /// The same with metric objects (or MetricArgs) per output (Keras' metrics={"cls":
  /// [keras.metrics.X(...)]}): each is logged as "<output>_<its name>" (CompiledMetric::log_name).
  /// A template only so that `{}` and `{{"cls", {"accuracy"}}}` still mean names.
  template <typename M>
    requires std::same_as<M, metrics::MetricPtr> || std::same_as<M, MetricArg>
  void compile(optimizers::OptimizerPtr optimizer, const std::map<std::string, losses::LossPtr>& losses,
               std::map<std::string, std::vector<M>> metrics, const std::map<std::string, double>& loss_weights = {},
               bool auto_scale_loss = true) {
    std::map<std::string, std::vector<MetricArg>> args;
    for (auto& [out, list] : metrics) args[out] = metric_args(std::move(list));
    compile_outputs(std::move(optimizer), losses, std::move(args), loss_weights, auto_scale_loss);
  }
  /// Keras' compile(weighted_metrics=...), given after compile (which clears them): metrics
  /// updated with the batches' sample weights (Metric::weighted_batch_state; unweighted where
  /// there are none), on `output`, by name ("" for a model of one output). Logged under their
  /// names ("<output>_<name>" for a model of several); a name that metrics (or the loss) took
  /// already becomes "weighted_<name>" ("<output>_weighted_<name>"), as Keras 3's
  /// CompileMetrics.result (keras/src/trainers/compile_utils.py). ValueError naming an output the
  /// model lacks, or a name taken twice. Metric objects or names (the template: as compile's, so
  /// that `{"accuracy", "mae"}` means names).
  void add_weighted_metrics(const std::vector<std::string>& names, const std::string& output = "");
  template <typename M>
    requires std::same_as<M, metrics::MetricPtr> || std::same_as<M, MetricArg>
  void add_weighted_metrics(std::vector<M> metrics, const std::string& output = "") {
    add_weighted(metric_args(std::move(metrics)), output);
  }
  bool compiled() const { return optimizer_ != nullptr; }
  /// Keras' model.jit_compile (jit_compile.hpp): how train steps run from the next one on.
  /// Under "auto" and true the first train step after compile runs eagerly and is checked; under
  /// true a device or an op that cannot be captured is then a ValueError naming it. evaluate's
  /// and predict's steps alike, each checked on its own first step.
  void set_jit_compile(JitCompile mode);
  JitCompile jit_compile() const { return jit_compile_; }
  /// Why train steps run eagerly under "auto": the device, the checked step's ops (or a failed capture).
  /// Empty before that step, under off, and where fit replays captured steps (step_replay.hpp).
  const std::string& jit_compile_reason() const { return jit_compile_reason_for(StepFunction::kTrain); }
  /// The same for evaluate's steps (kTest) or predict's, each checked on its first step; empty
  /// where they are replayed (one replica, every op capturable). kTrain: jit_compile_reason().
  const std::string& jit_compile_reason_for(StepFunction step) const;
  /// Keras' compile(steps_per_execution=N): fit, evaluate and predict run N batches per host
  /// round trip. Losses and metrics are read (and reduced across replicas) once per execution,
  /// and batch callbacks fire once per execution: on_*_batch_begin(first batch) and
  /// on_*_batch_end(last batch, logs). The weights are those of N = 1. An execution never spans
  /// an epoch's end: the last one of an epoch is cut to the steps left (Keras 3 runs N whole).
  /// ValueError unless n >= 1.
  void set_steps_per_execution(std::int64_t n);
  std::int64_t steps_per_execution() const { return steps_per_execution_; }

  History fit(const data::Dataset& dataset, const FitOptions& options = {});
  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  /// Returns {"loss": ..., metric names...}.
  Logs evaluate(const data::Dataset& dataset, const EvaluateOptions& options = {});
  Logs evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options = {});
  /// Outputs for every row of x, in input order.
  Tensor predict(const Tensor& x, const PredictOptions& options = {});
  Tensor predict(const data::Dataset& dataset, const PredictOptions& options = {});
  /// Several inputs and outputs: one tensor per input (input_structure()'s order) and per
  /// target; a dataset's elements hold the inputs, then the targets.
  History fit(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, const FitOptions& options = {});
  Logs evaluate(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, const EvaluateOptions& options = {});
  /// One tensor per output (output_structure()'s order).
  std::vector<Tensor> predict(const std::vector<Tensor>& xs, const PredictOptions& options = {});
  std::vector<Tensor> predict_outputs(const data::Dataset& dataset, const PredictOptions& options = {});

  /// How the model's inputs and outputs are nested, and their names (one tensor unless a
  /// Functional says otherwise).
  const Structure& input_structure() const { return inputs_; }
  const Structure& output_structure() const { return outputs_; }

  /// Builds the model for input_shape (batch dimension -1) if not yet built.
  virtual void build(const Shape& input_shape) = 0;
  virtual bool built() const = 0;
  /// Forward pass. Returns the output and, when the output layer is a softmax, its logits.
  struct Output {
    Tensor output;
    Tensor logits;
    /// The output's Keras mask (Layer::compute_mask carried through the model from an
    /// Embedding(mask_zero=true)): uint8 [batch, steps], nonzero where a step counts; undefined
    /// for none. Keras' loss and metrics weigh the output's positions by it (sample_weights.hpp).
    Tensor mask;
  };
  virtual Output forward(const Tensor& x, const layers::CallContext& ctx) const = 0;
  /// One tensor per input, one Output per output; a model of one runs forward().
  virtual std::vector<Output> forward_all(std::span<const Tensor> xs, const layers::CallContext& ctx) const;
  /// The shape one batch of input has (batch dimension -1); the model must be built.
  virtual Shape input_shape() const = 0;
  /// The shape of forward()'s output for input_shape() (batch dimension -1).
  virtual Shape output_shape() const = 0;
  /// Keras' summary table (layer, output shape, params, totals); the model must be built.
  virtual std::string summary() const = 0;
  /// Inference on one batch (training = false).
  Tensor operator()(const Tensor& x) const;
  /// Keras' model(x, training=True): a call with `ctx`, whose fields left at their defaults are
  /// filled in: the replica running this thread (current_replica()), the model's seed and, for
  /// a training call, the step and first example that key dropout — inside strategy.run(fn,
  /// batch) the strategy's step and this slice's global row, so N replicas draw the masks one
  /// device would; outside a strategy, a count of the model's training calls.
  Tensor operator()(const Tensor& x, const layers::CallContext& ctx) const;
  /// operator()(x, ctx) with the output's Keras mask beside it (Keras' y_pred._keras_mask, from an
  /// Embedding(mask_zero=true)): what a custom loop hands its loss and metrics, which leave out
  /// the masked positions as fit does: loss(y, o.output, Tensor(), o.mask) and
  /// metric.update_state(y, o.output, Tensor(), o.mask). A model of one output; o.logits undefined.
  Output call_with_mask(const Tensor& x, const layers::CallContext& ctx = {}) const;

  /// Keras' model.layers, in the model's order (Sequential's and Functional's say which), each
  /// layer once: a layer called twice in a Functional is listed once, and a Sequential refuses a
  /// layer whose name it holds already (Keras' rule), so one layer object never comes twice.
  const std::vector<layers::LayerPtr>& layers() const { return layers_; }
  /// Keras' model.variables: the variables of layers(), in that order (a layer called twice in a
  /// Functional shares its weights: they are the model's once, updated once per step).
  std::vector<Variable> variables() const;
  /// Keras' model.trainable_variables and non_trainable_variables: a frozen layer's weights are
  /// among the latter (Layer::set_trainable).
  std::vector<Variable> trainable_variables() const;
  std::vector<Variable> non_trainable_variables() const;
  /// Keras' model.trainable: true unless set. Setting it sets every layer's (Keras' setter is
  /// recursive): model.set_trainable(false) freezes them all; a layer's own setting may then differ.
  /// fit trains the weights trainable at compile: a layer's setting changed after compile is a
  /// ValueError at the next train step, naming the layer and the fix (compile again), where
  /// Keras would go on training the weights of compile's time without a word.
  bool trainable() const { return trainable_; }
  void set_trainable(bool trainable);
  /// The elements of variables(): a shared layer's weights count once.
  std::int64_t count_params() const;

  const optimizers::OptimizerPtr& optimizer() const { return optimizer_; }
  const losses::LossPtr& loss() const { return loss_; }
  /// A compiled metric: the object (holding its state, keeping the name it was given), the output
  /// it reads (0 for a model of one output), whether it is one of Keras' weighted_metrics
  /// (add_weighted_metrics), and the key of its logs, as Keras names it (compile_utils.py): its
  /// name, after "<output>_" for a model of several outputs, and "weighted_" before the name for a
  /// weighted metric whose key was taken (Model::add_metric, the rule's one owner).
  struct CompiledMetric {
    metrics::MetricPtr metric;
    std::size_t output = 0;
    bool weighted = false;
    std::string log_name;
  };
  /// compile's metrics, then add_weighted_metrics', in the logs' order.
  const std::vector<CompiledMetric>& metrics() const { return metrics_; }
  /// Per output of a model of several (empty for one): its name, loss and weight.
  struct OutputLoss {
    std::string name;
    losses::LossPtr loss;
    double weight = 1.0;
  };
  const std::vector<OutputLoss>& output_losses() const { return output_losses_; }
  std::uint64_t seed() const { return seed_; }
  /// Seed for weights and dropout; call before the model is built.
  void set_seed(std::uint64_t seed);
  const FitTiming& last_fit_timing() const { return timing_; }
  /// The running totals behind the logs ("loss" and each metric: [total, count]); what a
  /// backup saves so that a resumed epoch reports the same averages.
  std::map<std::string, std::vector<double>> metric_states() const;
  void set_metric_states(const std::map<std::string, std::vector<double>>& states);

  /// Set by a callback to end fit() after the current batch (Keras' model.stop_training).
  bool stop_training = false;

  /// One training step on a (global) batch: forward, loss, gradient, update — on every replica
  /// of the model's strategy, each on its slice, gradients all-reduced. Returns the batch's mean loss.
  double train_step(const Tensor& x, const Tensor& y);

  /// Trains under `strategy` from now on: mirrors the variables (broadcast from replica 0).
  /// A model made inside strategy.scope() is distributed already. The strategy must outlive
  /// the model's use of it.
  void distribute(distribute::Strategy& strategy);
  distribute::Strategy* strategy() const { return strategy_; }
  /// After training whose optimizer update was sharded over several workers, each worker holds
  /// only its shards of the optimizer's slots: this all-gathers them, so that every worker holds
  /// them whole (and a checkpoint can be written). Every worker must call it; a no-op otherwise.
  /// fit calls it at every epoch's end and BackupAndRestore before each backup.
  void gather_optimizer_slots();
  int num_replicas() const { return strategy_ ? strategy_->num_replicas_in_sync() : 1; }

 protected:
  /// How every model's forward ends, given its output layer and a way to run that layer on its
  /// input(s) (`run(true)`: the layer's call_logits). The final softmax and the loss are computed
  /// in float32 whatever the layers' policy (Keras' advice for mixed precision, applied for the
  /// user): a 16-bit softmax loses the small probabilities that the loss and its gradient are
  /// made of. A softmax output layer also returns its logits, so the loss is computed stably;
  /// its softmax is left to the loss when `softmax_to_loss` (CallContext's), unless the call is
  /// `masked` and the layer's call reads its mask (Layer::call_takes_mask: a masked Softmax).
  template <typename Run>
  static Output output_in_float32(const layers::Layer& last, Run&& run, bool softmax_to_loss = false,
                                  bool masked = false) {
    Output out;
    if (last.has_softmax_output() && !(masked && last.call_takes_mask())) {
      out.logits = as_float32(run(true));
      if (!softmax_to_loss) out.output = softmax(out.logits);
    } else {
      out.output = as_float32(run(false));
    }
    return out;
  }
  /// The seed that builds layers()[i]: the model's, mixed with the index, so that a Functional
  /// and the equivalent Sequential start from the same weights.
  std::uint64_t layer_seed(std::size_t i) const { return layers::mix_seed(seed_, i + 1); }
  /// The one way a model's list of layers changes (each class fills it: Sequential::add, the
  /// Functional's constructor): each step's variables are walked again before the next step.
  /// Every layer once (layers()).
  void add_layer(layers::LayerPtr layer);
  void set_layers(std::vector<layers::LayerPtr> layers);
  std::uint64_t seed_;

 private:
  std::vector<layers::LayerPtr> layer_list_;  // layers(), changed by add_layer and set_layers only
  bool layers_changed_ = true;                // since the step's variables were walked

 protected:
  /// layers(), for the classes to read (const: they change it through add_layer and set_layers).
  const std::vector<layers::LayerPtr>& layers_ = layer_list_;
  Structure inputs_{Structure::Form::kOne, {""}};
  Structure outputs_{Structure::Form::kOne, {""}};

 private:
  friend class detail::FitLoop;
  static Tensor as_float32(const Tensor& t);
  /// x as forward() takes it: float32, or integer pixels as they are when the model rescales its
  /// own input (rescales_its_input).
  Tensor input_of(const Tensor& x) const;
  /// operator()'s forward where the variables are (Keras places the call): inside a replica on
  /// its device (host data is copied there; a variable made outside the scope is refused with
  /// Keras' message); outside, a model whose variables a GPU holds runs on its strategy's first
  /// device and the output comes back to this thread's device.
  Output call_where_variables_are(const Tensor& x, const layers::CallContext& ctx) const;
  void check_compiled(const char* what) const;
  /// ValueError unless every layer's trainable setting is the one compile took (set_trainable's rule).
  void check_trainable_as_compiled();
  /// fit on in-memory tensors (inputs, then targets), validation_split held out.
  History fit_split(const data::Element& xy, const FitOptions& options);
  /// compile's common part: the optimizer (loss-scaled under mixed_float16), the first loss, no metrics yet.
  void take_optimizer(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, bool auto_scale_loss);
  template <typename M>
  static std::vector<MetricArg> metric_args(std::vector<M> given) {
    return {std::make_move_iterator(given.begin()), std::make_move_iterator(given.end())};
  }
  /// compile's metrics of one output as objects: a name made by that output's loss (metrics::get),
  /// an object as given. ValueError naming an unknown name.
  static std::vector<metrics::MetricPtr> made_metrics(std::vector<MetricArg> given, const std::string& loss_name);
  void compile_metrics(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, std::vector<MetricArg> metrics,
                       bool auto_scale_loss);
  void compile_outputs(optimizers::OptimizerPtr optimizer, const std::map<std::string, losses::LossPtr>& losses,
                       std::map<std::string, std::vector<MetricArg>> metrics,
                       const std::map<std::string, double>& loss_weights, bool auto_scale_loss);
  void add_weighted(std::vector<MetricArg> metrics, const std::string& output);
  /// Adds `metric` to metrics_, reading output k, under its log key (CompiledMetric's rule), which
  /// joins `taken` (the keys in use that it must not repeat). ValueError from Model::<what> where
  /// the key is taken already, or, for an unweighted metric, the object is held already (it holds
  /// one output's state); a weighted object held already is cloned empty (a state of its own).
  void add_metric(metrics::MetricPtr metric, std::size_t k, bool weighted, std::set<std::string>& taken,
                  const char* what);
  /// Keras' rule: a model used (compile/fit) inside a strategy's scope must have been made in
  /// it; ValueError with Keras' message and the fix otherwise. An unbuilt model without a
  /// strategy adopts the open scope's (its variables will be made under it).
  void check_strategy_scope(const char* what);
  /// evaluate on in-memory tensors (inputs, then targets), with options' sample weights.
  Logs evaluate_tensors(data::Element xy, const EvaluateOptions& options);
  Logs evaluate_impl(const data::Dataset& dataset, std::int64_t steps, const std::vector<CallbackPtr>& callbacks,
                     int verbose);
  Logs collect_logs(const char* prefix) const;
  /// The same into `logs`, whose values are overwritten where it has their names already: fit's
  /// batch logs, refreshed each execution without a map made and freed each time.
  void collect_logs_into(Logs& logs, const char* prefix) const;
  void reset_metrics();
  /// What a replica does with its gradients of one batch: apply them (with those held back
  /// before: the group's sum), or hold them back for gradient accumulation. A strategy's
  /// replicas hold them back under no_sync (its ShardedUpdate keeps the sums); without a
  /// strategy, the model's fit_sums_ keep them (group_sums()).
  enum class GradientUse { kApply, kHoldBack };
  /// One replica's forward on its slice (inputs, then targets) and its loss sums into r: the
  /// loss_sum of a model of one output, else each output's own sum (their weighted total is
  /// formed where the numbers are read). A model of one input and output takes the path it
  /// always took: forward(), no vectors.
  void slice_loss(const data::Element& s, const layers::CallContext& ctx, detail::SliceOutputs& outs,
                  detail::ReplicaNumbers& r) const;
  /// Each metric's batch state, on its output and target.
  void slice_metric_states(const data::Element& s, const detail::SliceOutputs& outs, detail::ReplicaNumbers& r) const;
  /// An element's components are the inputs, then (`targets`) the targets, then optionally sample
  /// weights (one for every output, or one per output): ValueError naming the model's inputs and
  /// outputs otherwise.
  void check_components(std::size_t components, const char* what, bool targets = true) const;
  /// Output k's sample weights in a slice (inputs, targets, then weights), undefined where it has none.
  Tensor sample_weight_of(const data::Element& s, std::size_t k) const;
  detail::ReplicaNumbers replica_train_step(const data::Element& s, std::int64_t first_example,
                                    std::int64_t global_n, std::int64_t step, ReplicaInterface* replica,
                                    GradientUse use);
  /// train_step on one batch of an accumulation group: its loss is divided by all the group's
  /// examples (`group_examples`), its rows numbered from `first_example` within the group.
  /// The replicas prepare their slices of the batch after meanwhile (batch.ahead).
  /// With `pending`, the batch's numbers are kept there for merge_numbers (no host read).
  double train_micro_step(const distribute::DistributedBatch& batch, std::int64_t first_example,
                          std::int64_t group_examples, GradientUse use, detail::PendingNumbers* pending = nullptr);
  /// Where an accumulation group's gradient sums are held: the strategy's (no_sync's), else fit_sums_.
  distribute::GradientAccumulator& group_sums() {
    return strategy_ ? strategy_->held_back_gradients() : fit_sums_;
  }
  /// Sums per-replica numbers through the strategy and adds them to the loss and metric trackers.
  void merge_replica_numbers(const distribute::PerReplica<detail::ReplicaNumbers>& parts, std::int64_t examples,
                             double* mean_loss);
  /// The same for every step of an execution, in step order: one cross-replica reduction and
  /// one host read for them all. Returns the last step's mean loss; empties `pending`.
  double merge_numbers(detail::PendingNumbers& pending);
  /// merge_numbers' two halves, for fit's deferred reads (several executions pending): the one
  /// reduction and host read of every pending step's numbers, then the merge of what it read
  /// of steps [first, last) into the trackers, in step order (returns the last one's mean loss).
  /// Neither empties `pending`.
  void read_numbers(detail::PendingNumbers& pending);
  double merge_read_numbers(const detail::PendingNumbers& pending, std::size_t first, std::size_t last);
  void ensure_mirrored();
  /// f(v) for each of variables(), in its order, without a vector made: the one walk that says
  /// which variables a model has (variables(), trainable_variables(), count_params()).
  template <typename F>
  void for_each_variable(F&& f) const;
  /// Brings step_variables_ and step_trainable_ up to date with variables(), walked again only
  /// where the list of layers changed (add_layer, set_layers), a layer anywhere made weights
  /// since (Layer::weights_made: layers build lazily, this model's or another's) or changed its
  /// trainable setting (Layer::trainable_changes); otherwise a step costs three comparisons.
  /// Where the walk differs, in the variables or in which of them train, the step functions are
  /// made again (a captured step would leave the new variables out, or update a frozen one). On the host, between steps; each step
  /// reads them without a vector made.
  void refresh_step_variables();
  /// A step function's jit_compile state (train's, evaluate's or predict's), made on first use
  /// (jit_compile.cpp).
  std::shared_ptr<detail::StepJit> step_jit(StepFunction step);
  /// Every step function is checked again at its next step (compile, set_jit_compile, distribute).
  void reset_step_jits();
  /// Under several workers: DistributedError unless every worker resumes at the same point.
  void check_workers_start_alike(int first_epoch, std::int64_t skip_batches);

  std::string name_;
  optimizers::OptimizerPtr optimizer_;
  losses::LossPtr loss_;
  std::vector<CompiledMetric> metrics_;
  std::vector<OutputLoss> output_losses_;
  metrics::Mean loss_tracker_{"loss"};
  std::deque<metrics::Mean> output_loss_trackers_;  // "<output>_loss" (a Mean does not move)
  distribute::Strategy* strategy_ = nullptr;
  // strategy_'s lifetime() and name, so that a model whose strategy is gone says so (set_strategy).
  std::weak_ptr<const void> strategy_lifetime_;
  std::string strategy_name_;
  void set_strategy(distribute::Strategy* strategy);
  /// ValueError naming the strategy when the one the model was made in or distributed to is gone.
  void check_strategy_alive() const;
  // The strategy whose workers took the chief's variables (ensure_mirrored), once per strategy.
  const distribute::Strategy* synced_workers_ = nullptr;
  FitTiming timing_;
  JitCompile jit_compile_ = JitCompile::kAuto;
  std::shared_ptr<detail::StepJit> step_jits_[3];  // by StepFunction (made by step_jit)
  // fit's accumulation sums on one device (a strategy holds its own): kept with the model, since
  // its captured steps write and read their memory.
  distribute::GradientAccumulator fit_sums_;
  std::shared_ptr<detail::PendingNumbers> step_numbers_;  // train_step(x, y)'s, its memory kept from call to call
  std::int64_t steps_per_execution_ = 1;
  std::vector<Variable> step_variables_, step_trainable_;  // refresh_step_variables()
  std::uint64_t walked_at_weights_ = 0;  // Layer::weights_made() when step_variables_ were walked
  std::uint64_t walked_at_trainable_ = 0;  // Layer::trainable_changes() then
  bool trainable_ = true;                  // trainable()
  // Each layer's trainable setting when compiled (check_trainable_as_compiled), and
  // Layer::trainable_changes() when last found the same: no walk while that count stays.
  std::vector<std::pair<std::weak_ptr<const layers::Layer>, bool>> compiled_trainable_;
  std::uint64_t compiled_at_trainable_ = 0;
  mutable std::atomic<std::uint64_t> training_calls_{0};  // operator()(x, {.training = true}) outside a strategy
};

}  // namespace lockstep
