// StepGraph, jit_compile's mechanism, on a GPU: ops captured once on a context's stream (a
// GEMM and elementwise kernels) replay on what their static inputs hold at each replay and give
// the bits the same ops give eagerly; an op that waits for the device inside the capture fails by
// name and leaves the stream usable. Emulated GPUs record the CPU's kernels the same way (CI).
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "backend/capture.hpp"
#include "backend/emulated_gpu.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/tensor/device_upload.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
bool emulated() { return backend::device_kind(DeviceKind::kCuda).emulated(); }
Tensor work(const Tensor& a, const Tensor& b) { return relu(add(matmul(a, b), a)); }
// The kernels, copies and fills one replay of `graph` runs on emulated GPUs.
std::int64_t replayed_work(StepGraph& graph) {
  const std::int64_t before = backend::emulated_replays().work;
  graph.replay();
  return backend::emulated_replays().work - before;
}
}  // namespace

TEST(GpuStepGraph, ReplaysTheCapturedOpsOnWhatTheirInputsHoldNow) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  Tensor a = test::random_uniform({64, 64}, 1).to(gpu), b = test::random_uniform({64, 64}, 2).to(gpu);
  (void)work(a, b).to_vector<float>();  // warm-up: the cache holds the blocks, the GEMM its plan
  Tensor mm, sum, out;                  // the captured work's outputs, kept with the graph
  StepGraph graph(*on.ctx, [&] {
    mm = matmul(a, b);
    sum = add(mm, a);
    out = relu(sum);
  });
  for (std::uint64_t seed : {3, 4, 5}) {
    const Tensor next = test::random_uniform({64, 64}, seed);
    a.copy_from(next.to(gpu));  // the static input, refilled in place
    graph.replay();
    const std::vector<float> got = out.to_vector<float>(), want = work(a, b).to_vector<float>();
    EXPECT_EQ(got, want) << "seed " << seed;
  }
}

TEST(GpuStepGraph, AnOpThatWaitsForTheDeviceFailsInsideTheCaptureAndTheStreamStaysUsable) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const Tensor a = test::random_uniform({8}, 1).to(gpu);
  (void)add(a, a).to_vector<float>();
  const std::string msg = message_of([&] { StepGraph graph(*on.ctx, [&] { (void)add(a, a).to_vector<float>(); }); });
  EXPECT_TRUE(has(msg, "a copy of 32 bytes from the device to the host inside a graph capture on gpu:0")) << msg;
  EXPECT_EQ(add(a, a).to_vector<float>().size(), 8u);  // eager work runs again
}

// fit captures the first step of each new input shape at once: a block neither the graph's pool
// nor the cache holds is new device memory, the graph's own (on a GPU a cudaMalloc while the
// thread captures), and the replay computes what the ops give eagerly.
TEST(GpuStepGraph, ACaptureTakesNewMemoryForWhatTheCacheLacks) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const Tensor small = test::random_uniform({4}, 1).to(gpu);
  (void)relu(add(small, small)).to_vector<float>();  // the kernels ran; no block of 64 x 64 floats cached
  const Tensor a = test::random_uniform({64, 64}, 2).to(gpu);
  Tensor out;
  StepGraph graph(*on.ctx, [&] { out = relu(add(a, a)); });
  graph.replay();
  EXPECT_EQ(out.to_vector<float>(), relu(add(a, a)).to_vector<float>());
}

// A copy from the host inside a capture is refused by name: CUDA would record the transfer out of
// a pinned staging block that later copies refill (a replay copying what the block holds then)
// and leave the block's fence unusable. The copies after it arrive as before.
TEST(GpuStepGraph, ACopyFromTheHostInsideACaptureIsRefusedAndLaterCopiesArrive) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const Tensor host = test::random_uniform({3}, 7).to(Device{});
  (void)host.to(gpu).to_vector<float>();  // warm-up: the cache holds the block
  const std::string msg = message_of([&] { StepGraph graph(*on.ctx, [&] { (void)host.to(gpu); }); });
  EXPECT_TRUE(has(msg, "a copy of 12 bytes from the host to the device inside a graph capture on gpu:0")) << msg;
  for (std::uint64_t seed : {8, 9}) {  // through the staging blocks, the one refused among them
    const Tensor next = test::random_uniform({3}, seed).to(Device{});
    EXPECT_EQ(next.to(gpu).to_vector<float>(), next.to_vector<float>()) << "seed " << seed;
  }
}

// The same for a copy out of a staging block the caller filled (DeviceUpload::stage: how the
// input path gathers a batch): refused by name, the block given back, later uploads arrive.
TEST(GpuStepGraph, AStagedCopyFromTheHostInsideACaptureIsRefusedAsAnyOther) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Tensor host = test::random_uniform({3}, 7).to(Device{});
  const auto upload = [&](const Tensor& values) {
    DeviceUpload up({values.shape()}, {values.dtype()});
    Tensor block = up.stage(0);
    EXPECT_TRUE(block.defined()) << "a staging block is lent on a GPU";
    block.copy_from(values);
    up.start({block});
    return up.take().front();
  };
  (void)upload(host).to_vector<float>();  // warm-up
  const std::string msg = message_of([&] { StepGraph graph(*on.ctx, [&] { (void)upload(host); }); });
  EXPECT_TRUE(has(msg, "a copy of 12 bytes from the host to the device inside a graph capture on gpu:0")) << msg;
  for (std::uint64_t seed : {8, 9}) {
    const Tensor next = test::random_uniform({3}, seed).to(Device{});
    EXPECT_EQ(upload(next).to_vector<float>(), next.to_vector<float>()) << "seed " << seed;
  }
}

// What the captured work allocated is the graph's until the graph is gone: a tensor made after
// the capture never gets memory a replay writes.
TEST(GpuStepGraph, MemoryTheCaptureTookIsNotHandedOutWhileTheGraphLives) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const Tensor a = test::random_uniform({16}, 1).to(gpu);
  (void)relu(add(a, a)).to_vector<float>();  // warm-up
  Tensor out;
  const void* intermediate = nullptr;
  auto graph = std::make_unique<StepGraph>(*on.ctx, [&] {
    const Tensor sum = add(a, a);  // freed inside the capture: the pool's, not the cache's
    intermediate = sum.raw_data();
    out = relu(sum);
  });
  graph->replay();
  const Tensor later = add(a, a);
  EXPECT_NE(later.raw_data(), intermediate);
  EXPECT_EQ(out.to_vector<float>(), relu(later).to_vector<float>());
}

// The emulated kind records each kernel with copies of its arguments, a host array of pointers
// (combine's) included, as CUDA's launch copies it into the kernel's parameters: a replay reads
// the pointers the capture was handed, whatever their array holds later.
TEST(GpuStepGraph, EmulatedGpusKeepTheHostArraysOfPointersAKernelIsHanded) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "what CUDA copies is CUDA's";
  const OnGpu0 on;
  EXPECT_EQ(step_capture_refusal(on.gpu), "");
  EXPECT_EQ(backend::kernel_capture_refusal(DeviceKind::kCuda, backend::KernelOp::kCombine), nullptr);
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}).to(on.gpu);
  const Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30, 40}, {4}).to(on.gpu);
  Tensor out = Tensor::zeros({4}).to(on.gpu);
  const void* in[2] = {a.raw_data(), b.raw_data()};
  void* outs[1] = {out.raw_data()};
  StepGraph graph(*on.ctx, [&] {
    backend::kernels(DeviceKind::kCuda, DType::kF32).combine(*on.ctx, ReduceOp::kSum, in, 2, outs, 1, 0, 4);
  });
  in[0] = in[1] = nullptr;  // the arrays change: the recording kept its own
  outs[0] = nullptr;
  a.copy_from(Tensor::from_vector(std::vector<float>{5, 6, 7, 8}, {4}).to(on.gpu));
  graph.replay();
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{15, 26, 37, 48}));
}

// Work another thread queues on a GPU while a capture records it is refused by name, whether that
// thread computes on the capturing context or on a context of its own on the GPU: CUDA records
// what any thread queues on the stream being captured, which every context of a GPU shares, so
// that work would not run now but at each replay. The capture goes on; its replays run the
// capturing thread's work alone (as many kernels as a capture without the other thread) and give
// the eager bits; once the capture ended, the other thread's work runs.
TEST(GpuStepGraph, AnotherThreadsWorkOnTheCapturedGpuIsRefusedAndTheReplayIsTheCapturingThreads) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const auto other = make_compute_context(gpu);
  const Tensor a = test::random_uniform({16, 16}, 1).to(gpu), b = test::random_uniform({16, 16}, 2).to(gpu);
  (void)work(a, b).to_vector<float>();  // warm-up: the caches hold the blocks
  const auto from_another_thread = [&](ComputeContext& ctx) {
    std::string msg = "did not run";
    std::thread t([&] {
      const ComputeScope scope(ctx);
      msg = message_of([&] { (void)add(a, b).to_vector<float>(); });
    });
    t.join();
    return msg;
  };
  EXPECT_EQ(from_another_thread(*other), "");  // warm-up of its own cache
  Tensor alone_out, out;
  std::string on_capturing, on_own;
  StepGraph alone(*on.ctx, [&] { alone_out = work(a, b); });
  StepGraph graph(*on.ctx, [&] {
    const Tensor mm = matmul(a, b);
    on_capturing = from_another_thread(*on.ctx);
    on_own = from_another_thread(*other);
    out = relu(add(mm, a));
  });
  for (const std::string& msg : {on_capturing, on_own})
    EXPECT_TRUE(has(msg, "queued by a thread other than the capture's inside a graph capture on gpu:0")) << msg;
  const backend::EmulatedReplays before = backend::emulated_replays();
  alone.replay();
  const backend::EmulatedReplays between = backend::emulated_replays();
  graph.replay();
  const backend::EmulatedReplays after = backend::emulated_replays();
  if (emulated()) {
    EXPECT_GT(between.work - before.work, 0);
    EXPECT_EQ(after.work - between.work, between.work - before.work) << "kernels a replay runs";
  }
  const std::vector<float> want = work(a, b).to_vector<float>();
  EXPECT_EQ(out.to_vector<float>(), want);
  EXPECT_EQ(alone_out.to_vector<float>(), want);
  EXPECT_EQ(from_another_thread(*on.ctx), "");
  EXPECT_EQ(from_another_thread(*other), "");
}

// A copy of GPU memory through a CPU context (the host's, current on a thread that set none)
// during a capture is refused by name, from another thread or from the capturing one: on CUDA it
// queues on the stream of the GPU that holds the memory, which the capture records (another
// thread's work is refused there; the capturing thread's copies to or from the host cannot be
// repeated by a replay); emulated GPUs cannot tell which GPU's memory it is and refuse it while
// any capture is under way. The replay is the capturing thread's work alone; after the capture
// the copies run.
TEST(GpuStepGraph, ACpuContextsCopyOfGpuMemoryDuringACaptureIsRefused) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  Tensor a = test::random_uniform({16, 16}, 1).to(gpu);
  const Tensor b = test::random_uniform({16, 16}, 2).to(gpu), host_b = b.to(Device{});
  (void)work(a, b).to_vector<float>();  // warm-up: the cache holds the blocks
  const auto copies = [&] {  // to the host and from it, with this thread's (CPU) context
    return std::vector<std::string>{message_of([&] { (void)b.to_vector<float>(); }),
                                    message_of([&] { a.copy_from(host_b); })};
  };
  const auto cpu = make_compute_context(Device{});
  std::vector<std::string> from_another, from_capturing;
  Tensor alone_out, out;
  StepGraph alone(*on.ctx, [&] { alone_out = work(a, b); });
  StepGraph graph(*on.ctx, [&] {
    std::thread t([&] { from_another = copies(); });
    t.join();
    {
      const ComputeScope host(*cpu);
      from_capturing = copies();
    }
    out = work(a, b);
  });
  const std::vector<std::string> direction = {"a copy of 1024 bytes from the device to the host",
                                              "a copy of 1024 bytes from the host to the device"};
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string& other = from_another[i];
    const std::string& own = from_capturing[i];
    if (emulated()) {
      for (const std::string& msg : {other, own}) {
        EXPECT_TRUE(has(msg, direction[i] + " through a CPU context during a graph capture on gpu:0")) << msg;
        EXPECT_TRUE(has(msg, "emulated GPUs cannot tell which GPU's memory it is")) << msg;
      }
    } else {
      EXPECT_TRUE(has(other, "queued by a thread other than the capture's inside a graph capture on gpu:0")) << other;
      EXPECT_TRUE(has(own, direction[i] + " inside a graph capture on gpu:0")) << own;
    }
  }
  if (emulated()) EXPECT_EQ(replayed_work(graph), replayed_work(alone));
  else graph.replay();
  EXPECT_EQ(out.to_vector<float>(), work(a, b).to_vector<float>());
  std::thread t([&] { from_another = copies(); });
  t.join();
  EXPECT_EQ(from_another, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());  // the copy into a ran
}

// The capturing thread's work through a second context of the captured GPU: CUDA records it into
// the graph (the contexts share the stream) though that context's memory is not the graph's, so
// a replay could write blocks the host reused; emulated GPUs refuse it by name instead of running
// it at once, so that a path doing it fails in CI before a GPU records it. The capture goes on and
// its replay runs the capturing context's work alone; after the capture the context runs again.
TEST(GpuStepGraph, EmulatedGpusRefuseTheCapturingThreadsWorkThroughASecondContext) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "CUDA records it";
  const OnGpu0 on;
  const auto second = make_compute_context(on.gpu);
  const Tensor a = test::random_uniform({16, 16}, 1).to(on.gpu), b = test::random_uniform({16, 16}, 2).to(on.gpu);
  (void)work(a, b).to_vector<float>();
  const auto on_second = [&] {
    const ComputeScope scope(*second);
    return message_of([&] { (void)add(a, b); });
  };
  EXPECT_EQ(on_second(), "");  // warm-up of its own cache
  std::string msg;
  Tensor alone_out, out;
  StepGraph alone(*on.ctx, [&] { alone_out = work(a, b); });
  StepGraph graph(*on.ctx, [&] {
    msg = on_second();
    out = work(a, b);
  });
  EXPECT_TRUE(has(msg, "queued through a second context of gpu:0 by the thread capturing it, inside a graph capture "
                       "on gpu:0"))
      << msg;
  EXPECT_EQ(replayed_work(graph), replayed_work(alone));
  EXPECT_EQ(out.to_vector<float>(), work(a, b).to_vector<float>());
  EXPECT_EQ(on_second(), "");
}

// A lane that joined a capture from a queue of its own records its thread's work alone, as the
// capturing lane does: another thread's work on that queue, through a context of its own moved
// there, is refused by name (as CUDA's lane() refuses it: the lane notes its thread at the join).
TEST(GpuStepGraph, EmulatedGpusRefuseAnotherThreadsWorkOnAJoinedLanesQueue) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "CUDA's lane() refuses it; this checks the emulated lanes";
  const OnGpu0 on;
  const auto joined = make_compute_context(on.gpu), other = make_compute_context(on.gpu);
  const backend::DeviceOps& ops = backend::device_ops(DeviceKind::kCuda);
  const Tensor a = test::random_uniform({8}, 1).to(on.gpu);
  ops.use_stream(*joined, 1);
  ops.use_stream(*other, 1);
  const auto add_on = [&](ComputeContext& ctx) {
    const ComputeScope scope(ctx);
    return message_of([&] { (void)add(a, a); });
  };
  backend::begin_capture(*on.ctx);
  ops.wait_fence(*joined, ops.record_fence(*on.ctx, false));  // the fork
  std::string msg = "did not run";
  std::thread t([&] { msg = add_on(*other); });
  t.join();
  EXPECT_EQ(add_on(*joined), "");  // recorded
  ops.wait_fence(*on.ctx, ops.record_fence(*joined, false));  // the join
  const std::shared_ptr<void> graph = backend::end_capture(*on.ctx, true);
  EXPECT_TRUE(has(msg, "the kernel binary queued by a thread other than the capture's inside a graph capture on gpu:0"))
      << msg;
  const backend::EmulatedReplays before = backend::emulated_replays();
  backend::replay_graph(*on.ctx, graph.get());
  EXPECT_EQ(backend::emulated_replays().work - before.work, 1) << "the joined lane's add alone";
  EXPECT_EQ(add_on(*other), "");  // after the capture
  ops.use_stream(*joined, 0);
  ops.use_stream(*other, 0);
}

// Two logical replicas of gpu:0, each on its thread, capture one graph: replica 0 begins it, the
// other joins by a fence (the fork) and is joined back before it ends; their all-reduce, a
// collective through the GPU's memory, orders them by fences inside it. Each replay is one launch
// of both lanes' work on what their static inputs hold then.
TEST(GpuStepGraph, LogicalReplicasCaptureOneGraphForkedFromTheFirst) {
  LOCKSTEP_REQUIRE_GPU();
  distribute::MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  distribute::CollectiveGroup* group = &strategy.collectives();
  LaneMeeting meeting(2, std::chrono::seconds(60), [group] { return group->failed(); });
  std::vector<Tensor> x(2), out(2);
  std::vector<std::unique_ptr<StepGraph>> graphs(2);
  const auto work = [&](distribute::ReplicaContext& rc) {
    const auto l = static_cast<std::size_t>(rc.local_replica_id());
    out[l] = rc.all_reduce(ReduceOp::kSum, relu(scale(x[l], 2.0f)));
  };
  strategy.run_void([&](distribute::ReplicaContext& rc) {
    const int l = rc.local_replica_id();
    x[static_cast<std::size_t>(l)] = test::random_uniform({40}, 1 + l, -1, 1).to(Device::parse("gpu:0"));
    work(rc);  // warm-up: the caches hold the blocks
    graphs[static_cast<std::size_t>(l)] =
        std::make_unique<StepGraph>(current_compute_context(), l, meeting, [&] { work(rc); });
  });
  const backend::EmulatedReplays before = backend::emulated_replays();
  for (std::uint64_t seed : {5, 7, 9}) {
    std::vector<Tensor> host(2);
    for (std::size_t l = 0; l < 2; ++l) host[l] = test::random_uniform({40}, seed + l, -1, 1);
    strategy.run_void([&](distribute::ReplicaContext& rc) {
      const auto l = static_cast<std::size_t>(rc.local_replica_id());
      x[l].copy_from(host[l].to(Device::parse("gpu:0")));
      graphs[l]->replay();
    });
    const std::vector<float> want = add(relu(scale(host[0], 2.0f)), relu(scale(host[1], 2.0f))).to_vector<float>();
    EXPECT_EQ(out[0].to_vector<float>(), want) << seed;
    EXPECT_EQ(out[1].to_vector<float>(), want) << seed;
  }
  if (emulated()) {
    EXPECT_EQ(backend::emulated_replays().graphs - before.graphs, 3);
    EXPECT_EQ(backend::emulated_replays().lanes - before.lanes, 6);
  }
}

// A context that joined a capture and was not joined back fails the capture's end by name (as
// CUDA's cudaErrorStreamCaptureUnjoined). It joins from a stream of its own, as a logical replica
// does (on the captured stream it would be a second context there, refused).
TEST(GpuStepGraph, EmulatedGpusRefuseToEndACaptureWithALaneNotJoinedBack) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "CUDA's own check";
  const OnGpu0 on;
  const auto other = make_compute_context(on.gpu);
  const backend::DeviceOps& ops = backend::device_ops(DeviceKind::kCuda);
  const Tensor a = test::random_uniform({8}, 1).to(on.gpu);
  ops.use_stream(*other, 1);
  backend::begin_capture(*on.ctx);
  ops.wait_fence(*other, ops.record_fence(*on.ctx, false));  // the fork: `other` joins
  {
    const ComputeScope scope(*other);
    (void)add(a, a);
  }
  const std::string msg = message_of([&] { (void)backend::end_capture(*on.ctx, true); });
  EXPECT_TRUE(has(msg, "was joined back")) << msg;
  EXPECT_TRUE(has(msg, "cudaErrorStreamCaptureUnjoined")) << msg;
  EXPECT_EQ(add(a, a).to_vector<float>().size(), 8u);  // both contexts run eagerly again
  const ComputeScope scope(*other);
  EXPECT_EQ(add(a, a).to_vector<float>().size(), 8u);
  ops.use_stream(*other, 0);
}

// A lane's thread that found its context captured and records its work after lane 0 ended the
// capture (lane 0's step failed: fit's label check on gpu:0x2, while lane 1 still queues its
// step) runs that work then, as work queued after the end. It was added to the ended capture's
// recording, freed by then: a lock of its freed mutex, whose first bytes the allocator had
// written, waited for good, and the replica never stopped.
TEST(GpuStepGraph, EmulatedGpusRunTheWorkALaneQueuesAsLaneZeroEndsTheCapture) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "the emulated capture's own bookkeeping";
  const OnGpu0 on;
  const auto lane = make_compute_context(on.gpu);
  const backend::DeviceOps& ops = backend::device_ops(DeviceKind::kCuda);
  const Tensor a = test::random_uniform({8}, 1).to(on.gpu);
  const std::vector<float> want = add(a, a).to_vector<float>();
  ops.use_stream(*lane, 1);
  std::promise<void> found, ended;
  std::promise<std::vector<float>> got;
  std::shared_future<void> ended_now = ended.get_future().share();
  std::atomic<bool> first{true};
  backend::set_emulated_record_hook([&] {
    if (!first.exchange(false)) return;
    found.set_value();  // the lane found its context captured ...
    ended_now.wait();   // ... and records its add after the capture ended
  });
  backend::begin_capture(*on.ctx);
  void* const fork = ops.record_fence(*on.ctx, false);
  std::thread t([&] {
    ops.wait_fence(*lane, fork);  // joins the capture as lane 1
    const ComputeScope scope(*lane);
    got.set_value(add(a, a).to_vector<float>());
  });
  std::future<std::vector<float>> result = got.get_future();
  const bool paused = found.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(paused) << "the lane's add was never about to be recorded";
  (void)backend::end_capture(*on.ctx, false);  // lane 0 failed: the capture is dropped
  ended.set_value();
  // A hang is what this guards against: the deadline only ends the test that would wait for good.
  const bool done = result.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  backend::set_emulated_record_hook({});
  if (!done) {
    t.detach();  // blocked for good: leaving it is all that is left
    FAIL() << "the lane's add, queued while lane 0 ended the capture, never returned";
  }
  t.join();
  EXPECT_EQ(result.get(), want) << "the add ran, after the capture it was queued in had ended";
  ops.use_stream(*lane, 0);
}

// The same through a strategy: two logical replicas of gpu:0 capture their step as the lanes of
// one graph, and replica 0's step fails inside the capture (fit's label check) while replica 1 is
// about to record an op. Replica 1 stops too, the run raises replica 0's error, and the strategy
// stays usable. Before, replica 1 waited for good on the freed capture's lock: the run gave up on
// it after the collective timeout ("did not stop within"), and every later run refused to start.
TEST(GpuStepGraph, LogicalReplicasStopWhenTheFirstFailsInsideTheCaptureAsTheOtherRecords) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "the emulated capture's own bookkeeping";
  const auto timeout = std::chrono::seconds(30);  // only a replica that never stops waits for it
  distribute::MirroredStrategy strategy({.devices = {"gpu:0x2"}, .collective_timeout = timeout});
  distribute::CollectiveGroup* group = &strategy.collectives();
  LaneMeeting meeting(2, timeout, [group] { return group->failed(); });
  std::promise<void> about_to_record;
  const std::shared_future<void> recording = about_to_record.get_future().share();
  std::atomic<bool> first{true};
  backend::set_emulated_record_hook([&] {
    if (!first.exchange(false)) return;  // replica 1's add: replica 0 records nothing
    about_to_record.set_value();
    // Until replica 0 failed, after it ended the capture.
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (!group->failed() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const std::string why = "label 7 at index 6 is outside [0, 2)";
  const std::string e = message_of([&] {
    strategy.run_void([&](distribute::ReplicaContext& rc) {
      const int l = rc.local_replica_id();
      const Tensor a = test::random_uniform({8}, 1).to(Device::parse("gpu:0"));
      (void)add(a, a).to_vector<float>();  // warm-up: the cache holds the block
      StepGraph graph(current_compute_context(), l, meeting, [&] {
        if (l == 1) return (void)add(a, a);
        (void)recording.wait_for(timeout);
        throw ValueError(why);
      });
    });
  });
  backend::set_emulated_record_hook({});
  EXPECT_TRUE(has(e, "replica 0 of 2") && has(e, why)) << e;
  EXPECT_FALSE(has(e, "did not stop")) << e;
  EXPECT_EQ(message_of([&] { strategy.run_void([](distribute::ReplicaContext&) {}); }), "");
}
