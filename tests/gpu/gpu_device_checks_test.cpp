// Range checks that stay on the device: labels and token ids with no host bytes (made on the
// device, as a custom loop's or gpu_bench's batches) are checked by a kernel into the context's
// error mark (backend/error_marks.hpp) instead of making the host wait, so a step that takes them
// is captured (jit_compile) and trains the bits of eager steps; a value out of range raises the
// eager check's ValueError at the host's next read (train_step's loss), in an eager step and in a
// replayed one, and the next good step runs. CI runs them on emulated GPUs (gpu.emulated).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "backend/capture.hpp"
#include "backend/emulated_gpu.hpp"
#include "backend/error_marks.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/host_reads.hpp"
#include "tensor/host_copy.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

constexpr std::int64_t kBatch = 8, kSteps = 5, kVocab = 10, kClasses = 3;

struct Batch {
  Tensor x, y;
};

// Token ids [8, 5] (int32) and labels [8] (int64) made on the strategy's device (from_vector
// there: no host bytes); batch `bad_at` holds `bad_token` at token 7 and `bad_label` at row 2
// where they are >= 0.
std::vector<Batch> device_batches(MirroredStrategy& strategy, int n, int bad_at = -1, std::int32_t bad_token = -1,
                                  std::int64_t bad_label = -1) {
  ComputeScope on(strategy.context(0));
  std::vector<Batch> out;
  for (int b = 0; b < n; ++b) {
    std::vector<std::int32_t> ids(kBatch * kSteps);
    std::vector<std::int64_t> labels(kBatch);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + b * 3) % kVocab);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i + b) % kClasses);
    if (b == bad_at && bad_token >= 0) ids[7] = bad_token;
    if (b == bad_at && bad_label >= 0) labels[2] = bad_label;
    out.push_back({Tensor::from_vector(ids, {kBatch, kSteps}), Tensor::from_vector(labels, {kBatch})});
  }
  return out;
}

std::unique_ptr<Sequential> token_classifier(JitCompile mode) {
  set_random_seed(5);  // the same weights for every model made here
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Embedding(kVocab, 4), layers::GlobalAveragePooling1D(), layers::Dense(kClasses)});
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  m->set_jit_compile(mode);
  return m;
}

struct Trained {
  std::vector<Tensor> weights;  // on the host
  std::string reason;           // jit_compile's
  std::string error;            // the bad batch's, if any
  int errors = 0;               // steps that raised
};

// train_step over `batches` on gpu:0 (each reads its loss: the host waits there); the first error
// a step raised, and the weights after every batch.
Trained train(JitCompile mode, const std::vector<Batch>& batches, MirroredStrategy& strategy) {
  auto scope = strategy.scope();
  auto model = token_classifier(mode);
  Trained t;
  ::testing::internal::CaptureStderr();
  for (const Batch& b : batches) {
    const std::string e = message_of([&] { (void)model->train_step(b.x, b.y); });
    if (e.empty()) continue;
    if (t.error.empty()) t.error = e;
    ++t.errors;
  }
  (void)::testing::internal::GetCapturedStderr();
  t.reason = model->jit_compile_reason();
  for (const auto& v : model->variables())
    t.weights.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
  return t;
}

bool emulated() { return backend::device_kind(DeviceKind::kCuda).emulated(); }

}  // namespace

// The step checks its labels (sparse cross-entropy) and its token ids (Embedding's gather) on the
// device: nothing reads the host inside it, jit_compile captures it, and its replays train the
// bits of eager steps.
TEST(GpuDeviceChecks, AStepOfDeviceLabelsAndTokenIdsIsCapturedAndTrainsTheEagerBits) {
  LOCKSTEP_REQUIRE_GPU();
  for (const char* devices : {"gpu:0", "gpu:0x2"}) {  // one replica; two logical ones, each with its mark
    SCOPED_TRACE(devices);
    MirroredStrategy strategy({.devices = {devices}});
    const std::vector<Batch> batches = device_batches(strategy, 6);
    const Trained eager = train(JitCompile::kOff, batches, strategy);
    const std::uint64_t checks_before = detail::host_reads("kernel first_outside");
    const backend::EmulatedReplays before = backend::emulated_replays();
    const Trained replayed = train(JitCompile::kAuto, batches, strategy);
    EXPECT_EQ(replayed.reason, "") << "the step was not captured";
    EXPECT_EQ(detail::host_reads("kernel first_outside"), checks_before) << detail::host_reads_by_cause();
    if (emulated()) {
      EXPECT_GE(backend::emulated_replays().graphs - before.graphs, 4) << "steps 2 to 6 are replays";
    }
    ASSERT_EQ(replayed.weights.size(), eager.weights.size());
    for (std::size_t i = 0; i < eager.weights.size(); ++i)
      EXPECT_TRUE(replayed.weights[i].bitwise_equal(eager.weights[i])) << "variable " << i;
    EXPECT_EQ(eager.error, "");
    EXPECT_EQ(replayed.error, "");
  }
}

// A label or token id out of range on the device: the op returns (its kernels skip the row, no
// read outside memory) and the host's next read raises the eager check's message, naming the op,
// the value, its index and the range; the mark is then clear, so the next good steps train on.
// The same in an eager step (the first, jit_compile's checked step) and in a replayed one.
TEST(GpuDeviceChecks, AValueOutOfRangeIsRaisedAtTheNextReadAndTheNextStepsRun) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string label_error = "sparse_softmax_cross_entropy_with_logits: label 7 at index 2 is outside [0, 3)";
  const std::string token_error = "gather_rows: label 12 at index 7 is outside [0, 10)";
  // On gpu:0x2 the bad row 2 and token 7 are in replica 0's slice, at the same index.
  for (const char* devices : {"gpu:0", "gpu:0x2"}) {
    for (const JitCompile mode : {JitCompile::kOff, JitCompile::kAuto}) {
      for (const int bad_at : {0, 3}) {  // the first step (eager either way), a later one (replayed under kAuto)
        SCOPED_TRACE(std::string(devices) + (mode == JitCompile::kOff ? ", off" : ", auto") + ", bad batch " +
                     std::to_string(bad_at));
        MirroredStrategy strategy({.devices = {devices}});
        const Trained label = train(mode, device_batches(strategy, 6, bad_at, -1, 7), strategy);
        EXPECT_EQ(label.error, label_error);
        EXPECT_EQ(label.errors, 1) << "the steps after the bad one raise nothing: its mark was cleared";
        const Trained token = train(mode, device_batches(strategy, 6, bad_at, 12, -1), strategy);
        EXPECT_EQ(token.error, token_error);
        EXPECT_EQ(token.errors, 1);
        if (mode == JitCompile::kAuto) {
          EXPECT_EQ(label.reason, "");
        }
        for (const Tensor& w : label.weights)  // the bad row was skipped: nothing non-finite, and the mark cleared
          for (float v : w.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
      }
    }
  }
}

// The same op, eagerly in a custom loop: no error when it is called, the error at the read, once;
// a read after it and the next op's read pass.
TEST(GpuDeviceChecks, AnEagerOpOnDeviceLabelsRaisesAtTheReadOnce) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Tensor logits = Tensor::zeros({4, 2});
  const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{0, 1, -3, 5}, {4});
  const Tensor good = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 1, 0}, {4});
  Tensor loss;
  EXPECT_EQ(message_of([&] { loss = sparse_softmax_cross_entropy_with_logits(bad, logits); }), "");
  std::vector<float> values;
  EXPECT_EQ(message_of([&] { values = loss.to_vector<float>(); }),
            "sparse_softmax_cross_entropy_with_logits: label -3 at index 2 is outside [0, 2)");
  EXPECT_EQ(message_of([&] { values = loss.to_vector<float>(); }), "") << "raised once: the mark is cleared";
  EXPECT_EQ(values[2], 0.0f) << "a row whose label is outside has loss 0";
  EXPECT_EQ(message_of([&] { (void)sparse_softmax_cross_entropy_with_logits(good, logits).to_vector<float>(); }), "");
  // A gather's bad index gathers zeros; one_hot's gives a row of zeros; a scatter skips it.
  const Tensor table = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{1, 2}, {2});
  Tensor rows;
  EXPECT_EQ(message_of([&] { rows = gather_rows(table, idx); }), "");
  EXPECT_EQ(message_of([&] { (void)rows.to_vector<float>(); }), "gather_rows: label 2 at index 1 is outside [0, 2)");
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{3, 4, 0, 0}));
  Tensor hot = one_hot(idx, 2);
  EXPECT_EQ(message_of([&] { (void)hot.to_vector<float>(); }), "one_hot: label 2 at index 1 is outside [0, 2)");
  EXPECT_EQ(hot.to_vector<float>(), (std::vector<float>{0, 1, 0, 0}));
  Tensor dst = Tensor::zeros({2, 2});
  scatter_add_rows(dst, idx, table);
  EXPECT_EQ(message_of([&] { (void)dst.to_vector<float>(); }),
            "scatter_add_rows: label 2 at index 1 is outside [0, 2)");
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0, 0, 1, 2}));
}

// Token ids fit copies from host arrays keep their host bytes up to the Embedding (Model::input_of
// gives them to it as integers, and it hands them to its gather before its own cast), so they are
// checked on the host, as a classifier's labels are: the step is captured, and a bad id in the
// first (eager) step is refused at once with the Embedding's message.
TEST(GpuDeviceChecks, TokenIdsFromHostArraysAreCheckedOnTheHostInFit) {
  LOCKSTEP_REQUIRE_GPU();
  std::vector<std::int32_t> ids(6 * kBatch * kSteps);
  std::vector<std::int64_t> labels(6 * kBatch);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7) % kVocab);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % kClasses);
  const auto fit = [&](const std::vector<std::int32_t>& x, std::string* reason) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    auto model = token_classifier(JitCompile::kAuto);
    ::testing::internal::CaptureStderr();
    const std::string e = message_of([&] {
      model->fit(Tensor::from_vector(x, {6 * kBatch, kSteps}), Tensor::from_vector(labels, {6 * kBatch}),
                 {.epochs = 1, .batch_size = kBatch, .shuffle = false, .verbose = 0});
    });
    (void)::testing::internal::GetCapturedStderr();
    *reason = model->jit_compile_reason();
    return e;
  };
  std::string reason;
  EXPECT_EQ(fit(ids, &reason), "");
  EXPECT_EQ(reason, "") << "the step was not captured";
  std::vector<std::int32_t> bad = ids;
  bad[7] = 12;
  const std::string e = fit(bad, &reason);
  EXPECT_TRUE(has(e, "(Embedding, input_dim 10): an index is outside the vocabulary: gather_rows: label 12 at index 7 "
                     "is outside [0, 10)"))
      << e;
}

// Logical replicas each have their own mark while a step runs: a replica's read raises its own
// check's error, never another replica's (replica 0 reads after the meeting that follows replica
// 1's bad gather, and passes); the driver's read after the step raises it, once; a replica that
// reads its own bad gather fails the step, named.
TEST(GpuDeviceChecks, AReplicaRaisesItsOwnMarkAndTheDriverEveryReplicasAfterTheStep) {
  LOCKSTEP_REQUIRE_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  const std::string error = "gather_rows: label 9 at index 1 is outside [0, 3)";
  std::vector<Tensor> tables(2), ids(2);
  strategy.run_void([&](ReplicaContext& r) {  // made on each replica's device: no host bytes
    const auto i = static_cast<std::size_t>(r.local_replica_id());
    tables[i] = Tensor::ones({3, 2});
    ids[i] = Tensor::from_vector(std::vector<std::int64_t>{0, i == 1 ? 9 : 1}, {2});
  });
  for (const bool replica_1_reads : {false, true}) {
    SCOPED_TRACE(replica_1_reads ? "replica 1 reads" : "replica 0 reads");
    std::string replica_0_read;
    const std::string step = message_of([&] {
      strategy.run_void([&](ReplicaContext& r) {
        const Tensor rows = gather_rows(tables[static_cast<std::size_t>(r.local_replica_id())],
                                        ids[static_cast<std::size_t>(r.local_replica_id())]);
        (void)r.all_reduce(ReduceOp::kSum, Tensor::ones({1}));  // the meeting: replica 1's check ran
        if (r.local_replica_id() == 0) replica_0_read = message_of([&] { (void)rows.to_vector<float>(); });
        if (r.local_replica_id() == 1 && replica_1_reads) (void)rows.to_vector<float>();
      });
    });
    EXPECT_EQ(replica_0_read, "") << "replica 1's error is not replica 0's";
    const ComputeScope on(strategy.context(0));
    const std::string driver = message_of([&] { (void)tables[0].to_vector<float>(); });
    if (replica_1_reads) {
      EXPECT_TRUE(has(step, "replica 1 of 2 (gpu:0) failed: " + error)) << step;
      EXPECT_EQ(driver, "") << "raised once, by the replica";
    } else {
      EXPECT_EQ(step, "");
      EXPECT_EQ(driver, error) << "the driver's read after the step raises every replica's";
    }
    EXPECT_EQ(message_of([&] { (void)tables[0].to_vector<float>(); }), "") << "cleared";
  }
}

// A context destroyed with its mark still set (a check no read raised) writes the error to stderr:
// never lost, never thrown from the destructor, and no later read elsewhere raises it.
TEST(GpuDeviceChecks, AContextDestroyedWithASetMarkWritesItsErrorAndNoOtherReadRaisesIt) {
  LOCKSTEP_REQUIRE_GPU();
  ::testing::internal::CaptureStderr();
  {
    const OnGpu0 on;
    const Tensor table = Tensor::ones({2, 2});
    (void)gather_rows(table, Tensor::from_vector(std::vector<std::int64_t>{4}, {1}));
  }
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(logged, "a context of gpu:0 was destroyed with an error no read raised: gather_rows: label 4 at "
                          "index 0 is outside [0, 2)"))
      << logged;
  const OnGpu0 other;
  EXPECT_EQ(message_of([&] { (void)Tensor::ones({1}).to_vector<float>(); }), "");
}

// A context's mark goes back for another context only once the host waited for the work queued on
// it: a check still running would otherwise set the mark of the context that takes it next, which
// would raise an error not its own. Emulated GPUs, whose work is done when queued, count the waits;
// a context that never made a mark waits for nothing.
TEST(GpuDeviceChecks, AContextsMarkGoesBackOnceTheHostWaitedForItsWork) {
  LOCKSTEP_REQUIRE_GPU();
  if (!backend::device_kind(DeviceKind::kCuda).emulated()) GTEST_SKIP() << "counted on emulated GPUs";
  const Device gpu = Device::parse("gpu:0");
  const std::int64_t before = backend::emulated_queue_waits();
  backend::ErrorMark* mark = nullptr;
  {
    const auto ctx = make_compute_context(gpu);
    mark = backend::error_mark(*ctx);
  }
  EXPECT_EQ(backend::emulated_queue_waits() - before, 1);
  (void)make_compute_context(gpu);
  EXPECT_EQ(backend::emulated_queue_waits() - before, 1) << "no mark, no wait";
  std::vector<std::shared_ptr<ComputeContext>> next;
  bool reused = false;
  for (int i = 0; i < 64 && !reused; ++i) {
    next.push_back(make_compute_context(gpu));
    reused = backend::error_mark(*next.back()) == mark;
  }
  EXPECT_TRUE(reused) << "a mark whose work is done is handed out again";
}

// Where the host cannot wait for a destroyed context's work (its queue is recorded by a capture:
// the work runs at the graph's replays), its mark is never handed out again: a late write into it,
// as that work would make, reaches no other context's read.
TEST(GpuDeviceChecks, AMarkWhoseWorkTheHostCannotWaitForIsNeverHandedOutAgain) {
  LOCKSTEP_REQUIRE_GPU();
  if (!backend::device_kind(DeviceKind::kCuda).emulated()) GTEST_SKIP() << "a second context's queue: emulated lanes";
  const OnGpu0 on;
  const backend::DeviceOps& ops = backend::device_ops(DeviceKind::kCuda);
  backend::ErrorMark* old = nullptr;
  backend::begin_capture(*on.ctx);
  {
    const auto joined = make_compute_context(on.gpu);
    old = backend::error_mark(*joined);
    ops.use_stream(*joined, 1);  // a queue of its own, as a logical replica's
    ops.wait_fence(*joined, ops.record_fence(*on.ctx, false));  // the fork: its queue is recorded
    ops.use_stream(*joined, 0);
  }
  (void)backend::end_capture(*on.ctx, false);
  std::vector<std::shared_ptr<ComputeContext>> next(32);
  for (auto& ctx : next) {
    ctx = make_compute_context(on.gpu);
    EXPECT_NE(backend::error_mark(*ctx), old);
  }
  old->value = 9;
  old->limit = 2;
  old->site = backend::error_site("a late check");
  old->set = 1;
  for (auto& ctx : next) {
    const ComputeScope scope(*ctx);
    EXPECT_EQ(message_of([] { (void)Tensor::ones({1}).to_vector<float>(); }), "");
  }
  EXPECT_EQ(message_of([] { (void)Tensor::ones({1}).to_vector<float>(); }), "");
}

// A kept index constant (device_constant keeps its host bytes) is range-checked on the host once
// for a limit, not by every op that takes it (zero_pad2d: n x h x w entries a call); against a
// smaller limit it is scanned again, and a value outside raises at every call.
TEST(GpuDeviceChecks, AKeptIndexConstantIsScannedOnceAndAValueOutsideRaisesEachTime) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const std::vector<std::int64_t> values{2, 0, 5};
  const auto kept = [&] {
    return device_constant({"test kept rows"}, 3, [&](std::int64_t n) {
      return Tensor::from_vector(std::vector<std::int64_t>(values.begin(), values.begin() + n), {n});
    });
  };
  const Tensor table = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {8, 1});
  const std::uint64_t scans = detail::host_copy_scans();
  Tensor rows = gather_rows(table, kept());
  EXPECT_EQ(detail::host_copy_scans(), scans + 1);
  for (int i = 0; i < 3; ++i) rows = gather_rows(table, kept());
  EXPECT_EQ(detail::host_copy_scans(), scans + 1) << "found inside [0, 8) once";
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{2, 0, 5}));
  const Tensor four = table.slice(0, 4);
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(message_of([&] { (void)gather_rows(four, kept()); }), "gather_rows: label 5 at index 2 is outside [0, 4)");
  EXPECT_EQ(detail::host_copy_scans(), scans + 3);
  const Tensor x = Tensor::ones({2, 3, 3, 1});
  (void)zero_pad2d(x, {1, 1, 1, 1});
  const std::uint64_t padded = detail::host_copy_scans();
  const std::vector<float> y = zero_pad2d(x, {1, 1, 1, 1}).to_vector<float>();
  EXPECT_EQ(detail::host_copy_scans(), padded);
  ASSERT_EQ(y.size(), 2u * 5 * 5);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const std::size_t r = i % 25 / 5, c = i % 5;
    EXPECT_EQ(y[i], r >= 1 && r <= 3 && c >= 1 && c <= 3 ? 1.0f : 0.0f) << i;
  }
}

// Integer device memory copied whole from the host keeps those bytes (checked there) until it is
// written in place: then its values are the device's, checked there, raised at the read. A write
// to float memory leaves every record as it was.
TEST(GpuDeviceChecks, AnInPlaceWriteForgetsTheHostBytesOfThatMemoryOnly) {
  LOCKSTEP_REQUIRE_GPU();
  const Tensor host = Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2});
  const OnGpu0 on;
  const auto copied = [&] {
    Tensor t = Tensor::empty({2}, DType::kI64);
    t.copy_from(host);
    detail::remember_host_copy(t, host);
    return t;
  };
  Tensor written = copied();
  const Tensor kept = copied();
  Tensor floats = Tensor::zeros({3});
  floats.fill_(2.0);
  EXPECT_NE(detail::host_copy_of(written), nullptr);
  written.fill_(5.0);
  EXPECT_EQ(detail::host_copy_of(written), nullptr);
  EXPECT_NE(detail::host_copy_of(kept), nullptr);
  const Tensor table = Tensor::ones({2, 1});
  Tensor rows;
  EXPECT_EQ(message_of([&] { rows = gather_rows(table, written); }), "") << "checked on the device now";
  EXPECT_EQ(message_of([&] { (void)rows.to_vector<float>(); }), "gather_rows: label 5 at index 0 is outside [0, 2)");
}
