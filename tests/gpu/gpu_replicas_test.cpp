// Replicas on GPUs: collectives among logical replicas on one GPU (through its memory) and
// across GPUs (NCCL), N replicas computing what one device would, fit on a GPU, and a model too
// big for a logical device's memory limit. Skipped without a GPU (NCCL rows: without two).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "backend/emulated_gpu.hpp"
#include "common/relative_error.hpp"
#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;
using lockstep::test::max_rel_diff;

namespace {
// fn(rank, communicator) on one thread per member, member r on a context of devices[r]: on
// stream r of its GPU with `own_streams` (as a strategy's logical replicas compute in a step),
// else on the stream the GPU's contexts share.
std::vector<std::exception_ptr> run_members(CollectiveGroup& group, const std::vector<Device>& devices,
                                            const std::function<void(int, Communicator&)>& fn,
                                            bool own_streams = false) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(group.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        const auto ctx = make_compute_context(devices[static_cast<std::size_t>(r)]);
        const auto use_stream = backend::device_ops(ctx->device().kind).use_stream;
        if (own_streams && use_stream) use_stream(*ctx, r);
        ComputeScope scope(*ctx);
        fn(r, group.member(r));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<float> member_values(int r, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>((i * 7 + r * 13) % 97) - 3.0f;
  return v;
}

// The collectives' results on `devices`, checked against sums computed here in member order.
void check_collectives(CollectiveImplementation impl, const std::vector<Device>& devices, bool exact,
                       bool own_streams = false) {
  const int n = static_cast<int>(devices.size());
  const std::int64_t len = 1000003;  // not a multiple of anything
  auto group = make_collective_group(impl, n, {.timeout = std::chrono::seconds(60), .devices = devices});
  std::vector<float> sum(static_cast<std::size_t>(len), 0.0f), mx(static_cast<std::size_t>(len), -1e30f);
  for (int r = 0; r < n; ++r) {
    const auto v = member_values(r, len);
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i], mx[i] = std::max(mx[i], v[i]);
  }
  std::vector<std::vector<float>> got_sum(n), got_max(n), got_scatter(n), got_gather(n), got_bcast(n);
  const std::int64_t chunk = 4096;
  const auto errors = run_members(*group, devices, [&](int r, Communicator& c) {
    const auto ru = static_cast<std::size_t>(r);
    Tensor t = Tensor::from_vector(member_values(r, len), {len});
    c.all_reduce(t, ReduceOp::kSum)->wait();
    got_sum[ru] = t.to_vector<float>();
    Tensor m = Tensor::from_vector(member_values(r, len), {len});
    c.all_reduce(m, ReduceOp::kMax)->wait();
    got_max[ru] = m.to_vector<float>();
    const Tensor in = Tensor::from_vector(member_values(r, chunk * n), {chunk * n});
    Tensor out = Tensor::empty({chunk});
    c.reduce_scatter(in, out, ReduceOp::kSum)->wait();
    got_scatter[ru] = out.to_vector<float>();
    const Tensor mine = Tensor::full({chunk}, static_cast<double>(r));
    Tensor all = Tensor::empty({chunk * n});
    c.all_gather(mine, all)->wait();
    got_gather[ru] = all.to_vector<float>();
    Tensor b = Tensor::from_vector(member_values(r, 999), {999});
    c.broadcast(b, n - 1)->wait();
    got_bcast[ru] = b.to_vector<float>();
    c.barrier()->wait();
  }, own_streams);
  for (int r = 0; r < n; ++r)
    if (errors[static_cast<std::size_t>(r)]) std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
  std::vector<float> scattered(static_cast<std::size_t>(chunk * n), 0.0f);
  for (int q = 0; q < n; ++q) {
    const auto v = member_values(q, chunk * n);
    for (std::size_t i = 0; i < v.size(); ++i) scattered[i] += v[i];
  }
  for (int r = 0; r < n; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    if (exact) EXPECT_EQ(got_sum[ru], sum) << "member " << r;
    else EXPECT_LE(max_rel_diff({got_sum[ru]}, {sum}), 1e-6) << "member " << r;
    EXPECT_EQ(got_sum[ru], got_sum[0]) << "members differ";
    EXPECT_EQ(got_max[ru], mx) << "member " << r;
    for (std::int64_t i = 0; i < chunk; ++i)
      ASSERT_NEAR(got_scatter[ru][static_cast<std::size_t>(i)], scattered[static_cast<std::size_t>(r * chunk + i)], 1e-4)
          << "member " << r << " element " << i;
    for (int q = 0; q < n; ++q)
      EXPECT_EQ(got_gather[ru][static_cast<std::size_t>(q * chunk)], static_cast<float>(q)) << "member " << r;
    EXPECT_EQ(got_bcast[ru], member_values(n - 1, 999)) << "member " << r;
  }
}

struct Batches {
  std::vector<Tensor> x, y;
};
Batches make_batches(const std::vector<std::int64_t>& sizes, std::int64_t features = 20) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batches b;
  for (auto n : sizes) {
    std::vector<float> xv(static_cast<std::size_t>(n * features));
    std::vector<std::int64_t> yv(static_cast<std::size_t>(n));
    for (auto& v : xv) v = u(rng);
    for (auto& v : yv) v = static_cast<std::int64_t>(rng() % 5);
    b.x.push_back(Tensor::from_vector(xv, {n, features}));
    b.y.push_back(Tensor::from_vector(yv, {n}));
  }
  return b;
}

std::unique_ptr<Sequential> make_model() {
  set_random_seed(11);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(16, "relu", 20), layers::Dropout(0.3), layers::Dense(5, "softmax")});
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// Trains on the batches under `strategy` (null: none, on the CPU) and returns the weights.
std::vector<std::vector<float>> train(Strategy* strategy, const Batches& b) {
  std::unique_ptr<Sequential> model;
  if (strategy) {
    auto scope = strategy->scope();
    model = make_model();
  } else {
    model = make_model();
  }
  for (std::size_t i = 0; i < b.x.size(); ++i) model->train_step(b.x[i], b.y[i]);
  if (strategy) strategy->check_mirrored(model->variables());
  std::vector<std::vector<float>> w;
  for (const auto& v : model->variables()) w.push_back(v.value().to_vector<float>());
  return w;
}
}  // namespace

TEST(GpuReplicas, CollectivesAmongLogicalReplicasOnOneGpu) {
  LOCKSTEP_REQUIRE_GPU();
  // The same chunks, combined in the same member order as on the CPU: the same bits.
  const std::vector<Device> one_gpu(4, Device{DeviceKind::kCuda, 0});
  check_collectives(CollectiveImplementation::kSharedMemory, one_gpu, true);
  // Each member on a stream of its own: the group's barriers order the streams (device fences).
  check_collectives(CollectiveImplementation::kSharedMemory, one_gpu, true, true);
}

// The device fences of the group's barriers, counted on emulated GPUs (which cannot run the
// ordering itself): each one recorded is waited for exactly once, by replicas of one GPU only.
TEST(GpuReplicas, EveryFenceOfACollectiveIsWaitedForOnce) {
  LOCKSTEP_REQUIRE_GPUS(2);
  if (!backend::device_kind(DeviceKind::kCuda).emulated()) GTEST_SKIP() << "counts the fences of emulated GPUs";
  const std::int64_t before = backend::emulated_fences_pending();
  for (const auto& devices : {std::vector<Device>(3, Device{DeviceKind::kCuda, 0}),
                              std::vector<Device>{Device{DeviceKind::kCuda, 0}, Device{DeviceKind::kCuda, 1}}}) {
    auto group = make_collective_group(CollectiveImplementation::kSharedMemory, static_cast<int>(devices.size()),
                                       {.timeout = std::chrono::seconds(60), .devices = devices});
    const auto errors = run_members(*group, devices, [](int r, Communicator& c) {
      for (int i = 0; i < 5; ++i) {
        Tensor t = Tensor::full({7}, static_cast<double>(r + i));
        c.all_reduce(t, ReduceOp::kSum)->wait();
        c.barrier()->wait();
      }
    }, true);
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  EXPECT_EQ(backend::emulated_fences_pending(), before);
  // And a strategy's steps on logical replicas of one GPU leave none behind either.
  MirroredStrategy three({.devices = {"gpu:0x3"}});
  const Batches b = make_batches({12, 7});
  (void)train(&three, b);
  EXPECT_EQ(backend::emulated_fences_pending(), before);
}

TEST(GpuReplicas, CollectivesOverNcclAcrossGpus) {
  LOCKSTEP_REQUIRE_REAL_GPUS(2);
  std::vector<Device> devices;
  for (int g = 0; g < gpus(); ++g) devices.push_back(Device{DeviceKind::kCuda, g});
  check_collectives(CollectiveImplementation::kNccl, devices, false);
}

TEST(GpuReplicas, NcclMismatchIsADistributedErrorOnEveryMember) {
  LOCKSTEP_REQUIRE_REAL_GPUS(2);
  const std::vector<Device> devices{Device{DeviceKind::kCuda, 0}, Device{DeviceKind::kCuda, 1}};
  auto group = make_collective_group(CollectiveImplementation::kNccl, 2, {.timeout = std::chrono::seconds(20),
                                                                         .devices = devices});
  const auto errors = run_members(*group, devices, [](int r, Communicator& c) {
    Tensor t = Tensor::zeros({r == 0 ? 10 : 11});
    c.all_reduce(t, ReduceOp::kSum)->wait();
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_TRUE(has(message_of([&] { std::rethrow_exception(e); }), "disagree"));
  }
}

// NCCL runs on each member's communication stream after the Work returned: collectives started
// well ahead of their waits come out right, and a member that lets go of its tensor at once does
// not hand the block to new work while NCCL still reads it (the group holds it until `done`).
TEST(GpuReplicas, NcclCollectivesStartedAheadOfTheirWaitsComeOutRight) {
  LOCKSTEP_REQUIRE_REAL_GPUS(2);
  const std::vector<Device> devices{Device{DeviceKind::kCuda, 0}, Device{DeviceKind::kCuda, 1}};
  auto group = make_collective_group(CollectiveImplementation::kNccl, 2, {.timeout = std::chrono::seconds(60),
                                                                         .devices = devices});
  const std::int64_t len = std::int64_t{1} << 22;
  constexpr int kStarted = 6;
  std::vector<float> expected = member_values(0, len);
  const std::vector<float> other = member_values(1, len);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += other[i];
  std::vector<std::vector<float>> got(kStarted);
  const auto errors = run_members(*group, devices, [&](int r, Communicator& c) {
    std::vector<Tensor> kept;
    std::vector<WorkPtr> works;
    for (int k = 0; k < kStarted; ++k) {
      Tensor t = Tensor::from_vector(member_values(r, len), {len});
      works.push_back(c.all_reduce(t, ReduceOp::kSum));
      if (r == 1) {
        kept.push_back(t);
        continue;
      }
      t = Tensor();  // member 0 lets go at once, and fills blocks of the same size
      Tensor junk = Tensor::full({len}, 1e6);
    }
    for (auto& w : works) w->wait();
    for (std::size_t k = 0; k < kept.size(); ++k) got[k] = kept[k].to_vector<float>();
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int k = 0; k < kStarted; ++k) EXPECT_EQ(got[static_cast<std::size_t>(k)], expected) << "collective " << k;
}

TEST(GpuReplicas, FourLogicalReplicasOnOneGpuComputeWhatOneDeviceWould) {
  LOCKSTEP_REQUIRE_GPU();
  // 7 is not divisible by 4; the short last batch of 2 leaves two replicas with no rows.
  const Batches b = make_batches({12, 7, 12, 9, 2});
  OneDeviceStrategy one("gpu:0");
  const auto reference = train(&one, b);
  MirroredStrategy four({.devices = {"gpu:0x4"}});
  EXPECT_EQ(four.num_replicas_in_sync(), 4);
  EXPECT_LE(max_rel_diff(train(&four, b), reference), 1e-5);
  // And the GPU computes what the CPU does, to float32 rounding over a few Adam steps.
  EXPECT_LE(max_rel_diff(reference, train(nullptr, b)), 1e-4);
}

// A GPU listed twice is refused as cpu:1,cpu:1 is (issue 41); several replicas on one GPU are
// written once, gpu:0x2.
TEST(GpuReplicas, AGpuListedTwiceIsRefusedAsACpuDeviceIs) {
  LOCKSTEP_REQUIRE_GPU();
  for (const std::vector<std::string>& devices : std::vector<std::vector<std::string>>{
           {"gpu:0", "gpu:0"}, {"gpu:0", "gpu:0", "gpu:0"}, {"gpu:0x2", "gpu:0"}, {"gpu:0", "GPU:0x2"}}) {
    const std::string message = message_of([&] { MirroredStrategy s({.devices = devices}); });
    EXPECT_TRUE(has(message, "device 'gpu:0' is listed twice")) << message;
    EXPECT_TRUE(has(message, "gpu:0xK")) << message;
  }
  const std::string cpu = message_of([] { MirroredStrategy s({.devices = {"cpu:1", "cpu:1"}, .num_cpu_devices = 2}); });
  EXPECT_TRUE(has(cpu, "device 'cpu:1' is listed twice")) << cpu;
  MirroredStrategy logical({.devices = {"gpu:0x2"}});
  EXPECT_EQ(logical.num_replicas_in_sync(), 2);
}

TEST(GpuReplicas, OneReplicaPerGpuOverNcclComputesWhatOneDeviceWould) {
  LOCKSTEP_REQUIRE_GPUS(2);
  const Batches b = make_batches({12, 7, 12, 9, 2});
  OneDeviceStrategy one("gpu:0");
  const auto reference = train(&one, b);
  MirroredStrategy all;  // every GPU
  EXPECT_EQ(all.num_replicas_in_sync(), gpus());
  EXPECT_LE(max_rel_diff(train(&all, b), reference), 1e-5);
}

namespace {
// fit() on a learnable rule (the label is the index of the largest of the first five features)
// under `strategy`; checks that it learns and reports its memory.
void fit_learns(MirroredStrategy& strategy) {
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    model = make_model();
  }
  const Batches b = make_batches({2048});
  std::vector<float> xv = b.x[0].to_vector<float>();
  std::vector<std::int64_t> yv(2048);
  for (std::size_t i = 0; i < yv.size(); ++i) {
    std::size_t best = 0;
    for (std::size_t k = 1; k < 5; ++k)
      if (xv[i * 20 + k] > xv[i * 20 + best]) best = k;
    yv[i] = static_cast<std::int64_t>(best);
  }
  const Tensor x = Tensor::from_vector(xv, {2048, 20}), y = Tensor::from_vector(yv, {2048});
  const History h = model->fit(x, y, {.epochs = 8, .batch_size = 64, .verbose = 0});
  const auto& loss = h.history.at("loss");
  EXPECT_LT(loss.back(), 0.8 * loss.front());
  EXPECT_GT(h.history.at("accuracy").back(), 0.45);  // chance: 0.2
  EXPECT_GT(h.history.at("peak_memory_mib").back(), 0.0);
  // NVML's utilisation of the GPUs, where NVML is there (it comes with the driver); never on CPUs.
  const bool on_gpu = context_device(strategy.context(0)).kind == DeviceKind::kCuda;
  if (on_gpu && context_utilization_percent(strategy.context(0))) {
    ASSERT_TRUE(h.history.count("gpu_utilization"));
    EXPECT_GE(h.history.at("gpu_utilization").back(), 0.0);
    EXPECT_LE(h.history.at("gpu_utilization").back(), 100.0);
  }
  if (!on_gpu) {
    EXPECT_FALSE(h.history.count("gpu_utilization"));
  }
}
}  // namespace

TEST(GpuReplicas, FitOnTheGpuLearnsAndReportsItsMemory) {
  LOCKSTEP_REQUIRE_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  fit_learns(strategy);
}

TEST(NoDevice, FitOnTwoCpuDevicesLearnsWhatTheGpuTestExpects) {
  // The same task and thresholds on CPU devices, so the GPU test's expectations are checked
  // wherever the suite runs.
  MirroredStrategy strategy({.num_cpu_devices = 2});
  fit_learns(strategy);
}

TEST(GpuReplicas, AModelTooBigForTheMemoryLimitIsANamedErrorNotAHang) {
  LOCKSTEP_REQUIRE_REAL_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0x2"}, .gpu_memory_limit = 4 << 20});  // 4 MiB per replica
  const std::string err = message_of([&] {
    auto scope = strategy.scope();
    set_random_seed(1);
    Sequential m({layers::Dense(4096, "relu", 1024), layers::Dense(10, "softmax")});  // 16 MiB of weights
    m.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {});
    m.train_step(Tensor::zeros({8, 1024}), Tensor::zeros({8}, DType::kI64));
  });
  EXPECT_TRUE(has(err, "gpu:0") && has(err, "asked for") && has(err, "free")) << err;
}

namespace {
// fit() on `strategy` from a dataset pipeline, its weights and losses, with the next batch
// copied to the devices ahead (prefetch_to_device) or not.
std::pair<std::vector<std::vector<float>>, std::vector<double>> fit_with_prefetch(MirroredStrategy& strategy,
                                                                                  bool prefetch,
                                                                                  std::int64_t steps_per_execution = 1) {
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    model = make_model();
  }
  model->set_steps_per_execution(steps_per_execution);
  const Batches b = make_batches({1000});
  // x as uint8 pixels: each replica casts its own slice, on its device. The label is the index of
  // the largest of the first five.
  std::vector<std::uint8_t> pixels;
  for (float v : b.x[0].to_vector<float>()) pixels.push_back(static_cast<std::uint8_t>(v * 32.0f));  // 0 .. 31
  std::vector<std::int64_t> labels(1000);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = std::max_element(pixels.begin() + static_cast<std::ptrdiff_t>(i * 20),
                                 pixels.begin() + static_cast<std::ptrdiff_t>(i * 20 + 5)) -
                (pixels.begin() + static_cast<std::ptrdiff_t>(i * 20));
  const Tensor x = Tensor::from_vector(pixels, {1000, 20}), y = Tensor::from_vector(labels, {1000});
  // 1000 = 15 batches of 64 and one of 40: the last is split unevenly over 3 replicas.
  const History h =
      model->fit(x, y, {.epochs = 2, .batch_size = 64, .shuffle = true, .verbose = 0, .prefetch_to_device = prefetch});
  std::vector<std::vector<float>> w;
  for (const auto& v : model->variables()) w.push_back(v.value().to_vector<float>());
  return {w, h.history.at("loss")};
}
}  // namespace

TEST(GpuReplicas, PrefetchToDeviceChangesNoResult) {
  LOCKSTEP_REQUIRE_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0x3"}});
  const auto in_order = fit_with_prefetch(strategy, false);
  // Each way twice first: a fit that is not deterministic is a failure of its own, named as such.
  EXPECT_EQ(fit_with_prefetch(strategy, false), in_order) << "fit without prefetch is not deterministic";
  const auto ahead = fit_with_prefetch(strategy, true);
  EXPECT_EQ(fit_with_prefetch(strategy, true), ahead) << "fit with prefetch is not deterministic";
  EXPECT_EQ(ahead.first, in_order.first);  // bit-identical weights
  EXPECT_EQ(ahead.second, in_order.second);
  std::printf("losses on 3 logical GPU devices: in order %.6f %.6f, prefetched %.6f %.6f\n", in_order.second[0],
              in_order.second[1], ahead.second[0], ahead.second[1]);
}

TEST(GpuReplicas, FitOnOneGpuIsDeterministic) {
  LOCKSTEP_REQUIRE_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0"}});
  const auto first = fit_with_prefetch(strategy, true);
  EXPECT_EQ(fit_with_prefetch(strategy, true), first);
  std::printf("losses on 1 GPU device: %.6f %.6f\n", first.second[0], first.second[1]);
}

TEST(GpuReplicas, StepsPerExecutionChangesNoResult) {
  // 16 batches an epoch in executions of 5 (the last of 1): the losses are read once per
  // execution, the weights and losses are those of one step per execution.
  LOCKSTEP_REQUIRE_GPU();
  for (const char* devices : {"gpu:0", "gpu:0x3"}) {
    MirroredStrategy strategy({.devices = {devices}});
    const auto one = fit_with_prefetch(strategy, true);
    const auto five = fit_with_prefetch(strategy, true, 5);
    EXPECT_EQ(five.first, one.first) << devices;  // bit-identical weights
    EXPECT_EQ(five.second, one.second) << devices;
  }
}

TEST(NoDevice, FitFromUint8PixelsOnThreeCpuDevicesComputesWhatTheGpuTestCompares) {
  // The GPU test's fit on CPU devices (where nothing is copied ahead): it runs and learns.
  MirroredStrategy strategy({.num_cpu_devices = 3});
  const auto [weights, loss] = fit_with_prefetch(strategy, true);
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_LT(loss.back(), loss.front());
  std::printf("losses on 3 CPU devices: %.6f %.6f\n", loss[0], loss[1]);
}
