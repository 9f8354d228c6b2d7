// No host wait per step on a GPU except where a value is asked for: fit, evaluate and predict
// read device memory back once per execution (the logs; predict's outputs), as the tensor
// layer counts them (lockstep/tensor/host_reads.hpp); labels from host arrays are checked on
// the host, and out-of-range ones are refused alike on every path. CI runs them on emulated
// GPUs, which count as real ones.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "lockstep/tensor/host_reads.hpp"
#include "tensor/host_copy.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;
using detail::host_reads;
using detail::host_reads_by_cause;

namespace {

// The host reads so far at each hook, and what made them.
class ReadCounter final : public Callback {
 public:
  struct Mark {
    std::string hook;
    std::uint64_t reads;
    std::string causes;
  };
  void on_epoch_begin(int, const Logs&) override { mark("epoch_begin"); }
  void on_epoch_end(int, const Logs&) override { mark("epoch_end"); }
  void on_train_batch_end(std::int64_t, const Logs&) override { mark("batch_end"); }
  void on_test_batch_end(std::int64_t, const Logs&) override { mark("batch_end"); }
  void on_predict_batch_end(std::int64_t, const Logs&) override { mark("batch_end"); }
  std::vector<Mark> marks;

  /// "hook reads (causes)" for every mark, for a failure's message.
  std::string str() const {
    std::string s;
    for (const auto& m : marks) s += "\n  " + m.hook + " " + std::to_string(m.reads) + " (" + m.causes + ")";
    return s;
  }

 private:
  void mark(const char* hook) { marks.push_back({hook, host_reads(), host_reads_by_cause()}); }
};

struct Data {
  Tensor x, y;
};
// n examples of 8 features, labelled 0 or 1, in host memory.
Data make_data(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n * 8));
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  std::uint32_t state = 99;
  for (auto& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 16777216.0f;
  }
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i * 8] > 0.5f ? 1 : 0;
  return {Tensor::from_vector(x, {n, 8}), Tensor::from_vector(y, {n})};
}

std::unique_ptr<Sequential> make_model(MirroredStrategy& strategy, std::int64_t steps_per_execution,
                                       optimizers::OptimizerPtr optimizer = nullptr) {
  auto scope = strategy.scope();
  set_random_seed(5);
  auto model = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(16, "relu", 8), layers::Dense(2, "softmax")});
  model->compile(optimizer ? std::move(optimizer) : optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(),
                 {"accuracy"});
  model->set_steps_per_execution(steps_per_execution);
  return model;
}

// One GPU, and two replicas: on two GPUs where there are, else on one (logical devices).
std::vector<std::vector<std::string>> device_lists() {
  return {{"gpu:0"}, gpus() >= 2 ? std::vector<std::string>{"gpu:0", "gpu:1"} : std::vector<std::string>{"gpu:0x2"}};
}

// Calls check(strategy, model, spe) for each device list and steps_per_execution, with a fresh
// strategy and model each time.
template <typename F>
void for_each_setup(std::initializer_list<std::int64_t> steps_per_execution, F&& check) {
  for (const auto& devices : device_lists()) {
    for (const std::int64_t spe : steps_per_execution) {
      SCOPED_TRACE(devices.front() + ".." + devices.back() + ", steps_per_execution " + std::to_string(spe));
      MirroredStrategy strategy({.devices = devices});
      auto model = make_model(strategy, spe);
      check(strategy, *model, spe);
    }
  }
}

}  // namespace

// Each way the host reads a device's memory counts once, by its cause.
TEST(GpuHostReads, EachReadOfDeviceMemoryCountsOnce) {
  LOCKSTEP_REQUIRE_GPU();
  const auto gpu = make_compute_context(Device{DeviceKind::kCuda, 0});
  ComputeScope scope(*gpu);
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});  // a copy to the device: no read
  const std::uint64_t copies = host_reads("copy to the host"), all = host_reads();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(t.slice(1, 2).item(), 2.0f);
  EXPECT_EQ(t.on_host().device().kind, DeviceKind::kCpu);
  EXPECT_EQ(host_reads("copy to the host"), copies + 3) << host_reads_by_cause();
  const std::uint64_t equal = host_reads("bitwise_equal");
  EXPECT_TRUE(t.bitwise_equal(t.clone()));
  EXPECT_EQ(host_reads("bitwise_equal"), equal + 1);
  const std::uint64_t norms = host_reads("kernel sum_squares");
  EXPECT_EQ(sum_squares(t), 14.0);
  EXPECT_EQ(host_reads("kernel sum_squares"), norms + 1);
  EXPECT_EQ(host_reads(), all + 5) << host_reads_by_cause();
  if (gpus() < 2) return;
  const std::uint64_t between = host_reads("copy between devices");
  EXPECT_EQ(t.to(Device{DeviceKind::kCuda, 1}).device().index, 1);
  EXPECT_EQ(host_reads("copy between devices"), between + 1);
}

// 640 examples in batches of 64: 10 steps an epoch. Each execution, the first included (the
// model is built and its step checked there), reads its logs once: the losses and every metric,
// summed over the replicas on the devices, in one vector. An epoch's end reads only what its
// validation asks (evaluate: once per execution; here 2 batches of 320), nothing without one.
TEST(GpuHostReads, FitReadsTheLogsOncePerExecution) {
  LOCKSTEP_REQUIRE_GPU();
  const Data d = make_data(640);
  for_each_setup({1, 3}, [&](MirroredStrategy&, Sequential& model, std::int64_t spe) {
    auto counter = std::make_shared<ReadCounter>();
    model.fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(64),
              {.epochs = 2, .verbose = 0, .callbacks = {counter}});
    model.fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(64),
              {.epochs = 1, .validation_data = data::Dataset::from_tensor_slices(d.x, d.y).batch(320), .verbose = 0,
               .callbacks = {counter}});
    // epoch_begin, 4 executions of 3 (3, 3, 3, 1) or 10 of 1, epoch_end; three epochs.
    const std::size_t executions = spe == 1 ? 10 : 4;
    const auto& m = counter->marks;
    ASSERT_EQ(m.size(), 3 * (executions + 2)) << counter->str();
    for (std::size_t i = 1; i < m.size(); ++i) {
      const std::string& hook = m[i].hook;
      const std::uint64_t reads = m[i].reads - m[i - 1].reads;
      const std::uint64_t validation = i + 1 == m.size() ? (spe == 1 ? 2 : 1) : 0;  // the last fit's
      if (hook == "batch_end") EXPECT_EQ(reads, 1u) << "mark " << i << counter->str();
      else if (hook == "epoch_end") EXPECT_EQ(reads, validation) << "mark " << i << counter->str();
      else EXPECT_EQ(reads, 0u) << hook << " at mark " << i << counter->str();
    }
  });
}

// Where every callback is async-safe (Callback::async_safe), fit reads the numbers of 16 steps
// at once (FitLoop::kMaxPendingSteps): 40 steps an epoch read after 16, 32 and 40; executions of
// 3 (13 of 3, then 1) after 5, 10 and 14 of them. Each batch end still gets its own logs, and
// the logs, History and weights are those of a read per execution (FitOptions::defer_reads
// false), under gradient accumulation too.
TEST(GpuHostReads, FitReadsOncePerSixteenStepsWhereEveryCallbackIsAsyncSafe) {
  LOCKSTEP_REQUIRE_GPU();
  const Data d = make_data(2560);
  struct Run {
    std::vector<std::pair<std::int64_t, Logs>> batches;
    History history;
    std::vector<std::vector<float>> weights;
    std::uint64_t reads = 0;  // between the epoch's begin and its end
  };
  // Records each batch end's logs and the host reads at the epoch's begin and end.
  class Recorder final : public Callback {
   public:
    bool async_safe() const override { return true; }
    void on_epoch_begin(int, const Logs&) override { at_begin_ = host_reads(); }
    void on_epoch_end(int, const Logs&) override { run.reads = host_reads() - at_begin_; }
    void on_train_batch_end(std::int64_t batch, const Logs& logs) override { run.batches.emplace_back(batch, logs); }
    Run run;

   private:
    std::uint64_t at_begin_ = 0;
  };
  for (const int accumulation : {1, 2}) {
    for_each_setup({1, 3}, [&](MirroredStrategy& strategy, Sequential&, std::int64_t spe) {
      SCOPED_TRACE("accumulation " + std::to_string(accumulation));
      const auto fit = [&](bool defer) {
        auto model = make_model(strategy, spe);
        auto recorder = std::make_shared<Recorder>();
        recorder->run.history = model->fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(64),
                                           {.epochs = 1, .verbose = 0, .callbacks = {recorder},
                                            .gradient_accumulation_steps = accumulation, .defer_reads = defer});
        for (const auto& v : model->variables()) recorder->run.weights.push_back(v.value().to_vector<float>());
        return recorder->run;
      };
      const Run deferred = fit(true), each = fit(false);
      const std::uint64_t executions = spe == 1 ? 40 : 14;
      EXPECT_EQ(deferred.reads, 3u) << host_reads_by_cause();
      EXPECT_EQ(each.reads, executions) << host_reads_by_cause();
      EXPECT_EQ(deferred.batches, each.batches);
      EXPECT_EQ(deferred.batches.size(), executions);
      for (const char* k : {"loss", "accuracy"}) EXPECT_EQ(deferred.history.history.at(k), each.history.history.at(k)) << k;
      EXPECT_EQ(deferred.weights, each.weights) << "the weights must be bit-identical";
    });
  }
}

// clipnorm and global_clipnorm: the norms are summed and applied by kernels, so a clipped step
// reads nothing back: each batch reads only its logs, as without clipping.
TEST(GpuHostReads, ClippingByNormReadsNoNormBack) {
  LOCKSTEP_REQUIRE_GPU();
  const Data d = make_data(256);
  for (const auto& devices : device_lists()) {
    SCOPED_TRACE(devices.front() + ".." + devices.back());
    MirroredStrategy strategy({.devices = devices});
    optimizers::AdamOptions o;
    o.learning_rate = 1e-2;
    o.clipnorm = 0.1;
    o.global_clipnorm = 0.2;
    auto model = make_model(strategy, 1, optimizers::Adam(o));
    auto counter = std::make_shared<ReadCounter>();
    const std::uint64_t norms = host_reads("kernel sum_squares");
    model->fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(64),
               {.epochs = 1, .verbose = 0, .callbacks = {counter}});
    EXPECT_EQ(host_reads("kernel sum_squares"), norms) << host_reads_by_cause();
    const auto& m = counter->marks;
    ASSERT_EQ(m.size(), 6u) << counter->str();  // epoch_begin, 4 batches, epoch_end
    for (std::size_t i = 1; i + 1 < m.size(); ++i) EXPECT_EQ(m[i].reads - m[i - 1].reads, 1u) << counter->str();
  }
}

// Under mixed_float16 the loss scale's finite check runs on the device (no sum of squares read
// back per gradient): on an eager step each replica reads its step's skipped mark once, beside
// the logs' one read; a replayed step (jit_compile captured it) reads only the logs, its scale
// and mark kept in the step block. An infinite input skips the step on every replica alike, the
// scale halves and the step does not count, as on the CPU.
TEST(GpuHostReads, MixedFloat16ChecksTheGradientsOnTheDeviceAndReadsOneMarkAReplica) {
  LOCKSTEP_REQUIRE_GPU();
  Data d = make_data(256);
  std::vector<float> xs = d.x.to_vector<float>();
  xs[2 * 64 * 8 + 3] = std::numeric_limits<float>::infinity();  // the third batch's first row
  const Tensor x = Tensor::from_vector(xs, {256, 8});
  struct Float16 {  // the global policy outlives the test, however it ends
    Float16() { mixed_precision::set_global_policy("mixed_float16"); }
    ~Float16() { mixed_precision::set_global_policy("float32"); }
  } policy;
  for (const auto& devices : device_lists()) {
    SCOPED_TRACE(devices.front() + ".." + devices.back());
    MirroredStrategy strategy({.devices = devices});
    auto model = make_model(strategy, 1);
    auto counter = std::make_shared<ReadCounter>();
    const std::uint64_t norms = host_reads("kernel sum_squares");
    const History h = model->fit(data::Dataset::from_tensor_slices(x, d.y).batch(64),
                                 {.epochs = 1, .verbose = 0, .callbacks = {counter}});
    EXPECT_EQ(host_reads("kernel sum_squares"), norms) << host_reads_by_cause();
    const auto& m = counter->marks;
    ASSERT_EQ(m.size(), 6u) << counter->str();  // epoch_begin, 4 batches, epoch_end
    const auto replicas = static_cast<std::uint64_t>(strategy.num_replicas_in_sync());
    const bool replayed = model->jit_compile_reason().empty();  // steps after the first, checked one
    for (std::size_t i = 1; i + 1 < m.size(); ++i)
      EXPECT_EQ(m[i].reads - m[i - 1].reads, i > 1 && replayed ? 1 : 1 + replicas)
          << "mark " << i << counter->str();
    EXPECT_EQ(h.history.at("skipped_steps")[0], 1);
    EXPECT_EQ(h.history.at("loss_scale")[0], 16384);
    EXPECT_EQ(model->optimizer()->iterations(), 3);
    strategy.check_mirrored(model->variables());
  }
}

// evaluate reads its logs once per execution; predict reads its outputs once per execution
// from each device (its share of the rows), in the order of batch-by-batch predictions.
TEST(GpuHostReads, EvaluateAndPredictReadOncePerExecution) {
  LOCKSTEP_REQUIRE_GPU();
  const Data d = make_data(640);
  for_each_setup({1, 4}, [&](MirroredStrategy& strategy, Sequential& model, std::int64_t spe) {
    model.fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(64), {.epochs = 1, .verbose = 0});
    const std::size_t executions = spe == 1 ? 10 : 3;
    auto counter = std::make_shared<ReadCounter>();
    std::uint64_t at = host_reads();
    model.evaluate(d.x, d.y, {.batch_size = 64, .callbacks = {counter}});
    ASSERT_EQ(counter->marks.size(), executions) << counter->str();
    for (const auto& mark : counter->marks) {
      EXPECT_EQ(mark.reads - at, 1u) << "evaluate" << counter->str();
      at = mark.reads;
    }
    counter->marks.clear();
    at = host_reads();
    const Tensor out = model.predict(d.x, {.batch_size = 64, .callbacks = {counter}});
    EXPECT_EQ(out.shape(), Shape({640, 2}));
    EXPECT_EQ(out.device().kind, DeviceKind::kCpu);
    ASSERT_EQ(counter->marks.size(), executions) << counter->str();
    for (const auto& mark : counter->marks) {
      EXPECT_EQ(mark.reads - at, static_cast<std::uint64_t>(strategy.num_replicas_in_sync())) << "predict" << counter->str();
      at = mark.reads;
    }
    EXPECT_EQ(host_reads(), at) << "predict after its last batch" << counter->str();
    model.set_steps_per_execution(1);  // the rows in the same order as batch by batch
    EXPECT_TRUE(out.bitwise_equal(model.predict(d.x, {.batch_size = 64})));
  });
}

// Labels fit copies from host arrays are checked on the host (no first_outside on the device);
// a label out of range is refused with the message the device's check gives labels that start
// on the device (a custom loop's), raised there at the host's next read.
TEST(GpuHostReads, LabelsOutOfRangeAreRefusedAlikeWhereverTheyAreChecked) {
  LOCKSTEP_REQUIRE_GPU();
  Data d = make_data(128);
  std::vector<std::int64_t> labels = d.y.to_vector<std::int64_t>();
  labels[70] = 7;  // the second batch's row 6
  const Tensor bad = Tensor::from_vector(labels, {128});
  const std::string want = "sparse_softmax_cross_entropy_with_logits: label 7 at index 6 is outside [0, 2)";
  for (const auto& devices : device_lists()) {
    SCOPED_TRACE(devices.front() + ".." + devices.back());
    MirroredStrategy strategy({.devices = devices});
    auto model = make_model(strategy, 1);
    const std::uint64_t checks_before = host_reads("kernel first_outside");
    for (const bool prefetch : {true, false}) {  // the copies ahead, and those in order
      const std::string e = message_of([&] {
        model->fit(data::Dataset::from_tensor_slices(d.x, bad).batch(64),
                   {.epochs = 1, .verbose = 0, .prefetch_to_device = prefetch});
      });
      EXPECT_TRUE(has(e, want)) << "prefetch_to_device " << prefetch << ": " << e;
    }
    EXPECT_EQ(host_reads("kernel first_outside"), checks_before)
        << "labels from the host were checked on the device: " << host_reads_by_cause();
  }
  // The same labels made on the device: checked there (into its error mark, no host read), the
  // same message at the read of the loss.
  const auto gpu = make_compute_context(Device{DeviceKind::kCuda, 0});
  ComputeScope scope(*gpu);
  const Tensor on_device = Tensor::from_vector(std::vector<std::int64_t>(labels.begin() + 64, labels.end()), {64});
  const Tensor logits = Tensor::zeros({64, 2});
  const std::uint64_t checks_before = host_reads("kernel first_outside");
  const std::string device_error = message_of(
      [&] { (void)sparse_softmax_cross_entropy_with_logits(on_device, logits).to_vector<float>(); });
  EXPECT_EQ(device_error, want);
  EXPECT_EQ(host_reads("kernel first_outside"), checks_before) << "the device's check read its answer back";
}

// Host bytes kept for a device copy stand for its labels only until it is written in place.
TEST(GpuHostReads, LabelsWrittenOnTheDeviceAreCheckedThere) {
  LOCKSTEP_REQUIRE_GPU();
  const Tensor host = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 1, 0}, {4});
  const auto gpu = make_compute_context(Device{DeviceKind::kCuda, 0});
  ComputeScope scope(*gpu);
  Tensor labels = host.to(Device{DeviceKind::kCuda, 0});
  detail::remember_host_copy(labels, host);
  const Tensor logits = Tensor::zeros({4, 2});
  EXPECT_EQ(message_of([&] { (void)sparse_softmax_cross_entropy_with_logits(labels, logits); }), "");
  labels.fill_(9);
  EXPECT_EQ(message_of([&] { (void)sparse_softmax_cross_entropy_with_logits(labels, logits).to_vector<float>(); }),
            "sparse_softmax_cross_entropy_with_logits: label 9 at index 0 is outside [0, 2)");
}
