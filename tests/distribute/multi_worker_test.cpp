// Collectives and MultiWorkerMirroredStrategy across worker processes. These tests need two
// MPI ranks: ctest runs this binary under `mpirun -np 2` (tests/cli_and_reference_tests.cmake);
// run plainly (gtest discovery, one process) they skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>

#include "common/random_data.hpp"
#include "distribute/member_threads.hpp"
#include "distribute/multi_worker_group.hpp"
#include "distribute/worker_transport.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {

bool multi_worker() { return launched_under_mpi() && built_with_mpi() && WorkerTransport::world().size() >= 2; }

#define REQUIRE_WORKERS() \
  if (!multi_worker()) GTEST_SKIP() << "needs mpirun -np 2 and a build with MPI"

// Runs fn(local member, communicator) on one thread per local member; rethrows the first failure.
void run_local(CollectiveGroup& group, const std::function<void(int, Communicator&)>& fn) {
  for (auto& e : run_members(group, fn))
    if (e) std::rethrow_exception(e);
}

// Replica g's input: 1003 floats that are not exactly representable sums of each other.
std::vector<float> input_of(int g, std::int64_t n) {
  std::mt19937 rng(1234 + static_cast<unsigned>(g));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// What one process's group of `n` members computes from input_of(0..n-1): the reference the
// multi-worker result must equal bit for bit (one local member per worker).
std::vector<float> in_process_all_reduce(int n, std::int64_t count, ReduceOp op) {
  auto group = make_collective_group(CollectiveImplementation::kSharedMemory, n);
  std::vector<std::vector<float>> out(static_cast<std::size_t>(n));
  run_local(*group, [&](int r, Communicator& c) {
    Tensor t = Tensor::from_vector(input_of(r, count), {count});
    c.all_reduce(t, op)->wait();
    out[static_cast<std::size_t>(r)] = t.to_vector<float>();
  });
  return out[0];
}

// Elements of float32 just past a shared-memory slot of `group` (past 4 MiB where the workers
// use MPI's messages, so that the test stays small).
std::int64_t floats_past_a_slot(const CollectiveGroup& group, std::int64_t extra) {
  const auto* mw = dynamic_cast<const MultiWorkerGroup*>(&group);
  const std::size_t slot = mw && mw->uses_shared_memory() ? MultiWorkerGroup::slot_bytes() : std::size_t{4} << 20;
  return static_cast<std::int64_t>(slot / sizeof(float)) + extra;
}

// This worker all-reduces input_of(worker, n) through `group` (one local member): success when it
// gets, bit for bit, what one process of W members computes.
::testing::AssertionResult all_reduce_is_one_process_bits(CollectiveGroup& group, std::int64_t n, ReduceOp op) {
  const int w = WorkerTransport::world().rank(), W = WorkerTransport::world().size();
  Tensor t = Tensor::from_vector(input_of(w, n), {n});
  group.member(0).all_reduce(t, op)->wait();
  const std::vector<float> want = in_process_all_reduce(W, n, op);
  const std::vector<float> got = t.to_vector<float>();
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << reduce_op_name(op) << " of " << n << " elements differs from one process's";
}

TEST(MultiWorker, RanksAndSizesSpanTheWorkers) {
  REQUIRE_WORKERS();
  const int w = WorkerTransport::world().rank(), W = WorkerTransport::world().size();
  auto group = make_collective_group(CollectiveImplementation::kMpi, 2);
  EXPECT_EQ(group->size(), 2);
  EXPECT_EQ(group->member(0).size(), 2 * W);
  EXPECT_EQ(group->member(0).rank(), 2 * w);
  EXPECT_EQ(group->member(1).rank(), 2 * w + 1);
}

TEST(MultiWorker, OneDevicePerWorkerAllReduceIsBitIdenticalToOneProcess) {
  REQUIRE_WORKERS();
  auto group = make_collective_group(CollectiveImplementation::kMpi, 1);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin})
    EXPECT_TRUE(all_reduce_is_one_process_bits(*group, 1003, op));
}

TEST(MultiWorker, TwoDevicesPerWorkerCollectivesAreExact) {
  REQUIRE_WORKERS();
  const int w = WorkerTransport::world().rank(), W = WorkerTransport::world().size();
  constexpr int D = 2;
  const int N = W * D;
  auto group = make_collective_group(CollectiveImplementation::kMpi, D);
  const std::int64_t k = 37;
  run_local(*group, [&](int d, Communicator& c) {
    const int g = w * D + d;
    ASSERT_EQ(c.rank(), g);
    // all_reduce: integers in float32 sum exactly, whatever the order.
    Tensor t = Tensor::full({k}, static_cast<double>(g + 1));
    c.all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_EQ(t.to_vector<float>()[5], static_cast<float>(N * (N + 1) / 2));
    Tensor m = Tensor::full({k}, static_cast<double>(g));
    c.all_reduce(m, ReduceOp::kMax)->wait();
    EXPECT_EQ(m.to_vector<float>()[0], static_cast<float>(N - 1));
    Tensor mean = Tensor::full({k}, static_cast<double>(2 * g));
    c.all_reduce(mean, ReduceOp::kMean)->wait();
    EXPECT_EQ(mean.to_vector<float>()[3], static_cast<float>(N - 1));
    // reduce_scatter: replica j gets the sum of everyone's block j.
    std::vector<float> in(static_cast<std::size_t>(N * k));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(g * 1000 + static_cast<int>(i));
    Tensor rs_in = Tensor::from_vector(in, {N * k});
    Tensor rs_out = Tensor::empty({k});
    c.reduce_scatter(rs_in, rs_out, ReduceOp::kSum)->wait();
    const float first = static_cast<float>(1000 * (N * (N - 1) / 2) + N * g * k);
    EXPECT_EQ(rs_out.to_vector<float>()[0], first);
    // all_gather: block j of the output is replica j's input.
    Tensor ag_in = Tensor::full({k}, static_cast<double>(g));
    Tensor ag_out = Tensor::empty({N * k});
    c.all_gather(ag_in, ag_out)->wait();
    const auto gathered = ag_out.to_vector<float>();
    for (int j = 0; j < N; ++j) EXPECT_EQ(gathered[static_cast<std::size_t>(j * k + 1)], static_cast<float>(j));
    // broadcast from a replica of the last worker.
    Tensor b = Tensor::full({k}, static_cast<double>(g));
    c.broadcast(b, N - 1)->wait();
    EXPECT_EQ(b.to_vector<float>()[2], static_cast<float>(N - 1));
    c.barrier()->wait();
  });
}

// Workers on one machine meet in lockstep's shared-memory segment, unless LOCKSTEP_WORKER_SHM=0
// (what the tests over TCP set, so that they take MPI's messages as workers on a network do).
TEST(MultiWorker, WorkersOnOneMachineMeetInSharedMemoryUnlessTurnedOff) {
  REQUIRE_WORKERS();
  auto group = make_collective_group(CollectiveImplementation::kMpi, 1);
  const auto* mw = dynamic_cast<const MultiWorkerGroup*>(group.get());
  ASSERT_NE(mw, nullptr);
  const char* env = std::getenv("LOCKSTEP_WORKER_SHM");
  const bool off = env && std::string(env) == "0";
  // A slot too large for /dev/shm (the ctest entry ..._without_room_in_dev_shm sets one) is
  // said and leaves the workers on MPI's messages.
  const bool no_room = MultiWorkerGroup::slot_bytes() >= (std::size_t{1} << 35);
  EXPECT_EQ(mw->uses_shared_memory(), !off && !no_room) << mw->shared_memory_note();
  if (off) {
    EXPECT_EQ(mw->shared_memory_note(), "LOCKSTEP_WORKER_SHM=0");
  } else if (no_room) {
    EXPECT_NE(mw->shared_memory_note().find("MiB free"), std::string::npos) << mw->shared_memory_note();
  }
}

// Whether the workers meet in shared memory is decided alike on all of them: one worker with
// LOCKSTEP_WORKER_SHM=0 (the ctest entry multi_worker.one_worker_turns_shared_memory_off starts
// worker 0 so) turns it off for every worker, instead of leaving the others waiting in it.
TEST(MultiWorkerMixed, OneWorkerTurningSharedMemoryOffTurnsItOffForAll) {
  REQUIRE_WORKERS();
  if (!std::getenv("LOCKSTEP_TEST_MIXED_SHM")) GTEST_SKIP() << "run by multi_worker.one_worker_turns_shared_memory_off";
  auto group = make_collective_group(CollectiveImplementation::kMpi, 1);
  const auto* mw = dynamic_cast<const MultiWorkerGroup*>(group.get());
  ASSERT_NE(mw, nullptr);
  EXPECT_FALSE(mw->uses_shared_memory());
  EXPECT_EQ(mw->shared_memory_note(), "LOCKSTEP_WORKER_SHM=0");
  EXPECT_TRUE(all_reduce_is_one_process_bits(*group, 1003, ReduceOp::kSum));
}

// Larger than a shared-memory slot, the data goes over MPI; the fold, and so the bits, are the
// same, and the next small collective is back in shared memory.
TEST(MultiWorker, CollectivesLargerThanASlotStayBitIdentical) {
  REQUIRE_WORKERS();
  const int w = WorkerTransport::world().rank(), W = WorkerTransport::world().size();
  auto group = make_collective_group(CollectiveImplementation::kMpi, 1);
  const std::int64_t big = floats_past_a_slot(*group, 1003);
  for (std::int64_t n : {big, std::int64_t{5000}, big})
    EXPECT_TRUE(all_reduce_is_one_process_bits(*group, n, ReduceOp::kSum));
  Tensor b = Tensor::full({big}, static_cast<double>(w));
  group->member(0).broadcast(b, W - 1)->wait();
  EXPECT_EQ(b.to_vector<float>()[static_cast<std::size_t>(big - 1)], static_cast<float>(W - 1));
}

TEST(MultiWorker, WorkersThatDisagreeGetAnErrorAndTheGroupGoesOn) {
  REQUIRE_WORKERS();
  const int w = WorkerTransport::world().rank();
  auto group = make_collective_group(CollectiveImplementation::kMpi, 1);
  // Sizes on both sides of a shared-memory slot, too: the disagreement is found before the
  // workers take different paths for the data.
  const std::int64_t big = floats_past_a_slot(*group, 1);
  for (std::int64_t other : {std::int64_t{11}, big}) {
    Tensor t = Tensor::ones({w == 0 ? 10 : other});
    try {
      group->member(0).all_reduce(t, ReduceOp::kSum)->wait();
      ADD_FAILURE() << "no error";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("workers disagree: worker 0 called all_reduce(10 x float32, sum)"),
                std::string::npos)
          << e.what();
    }
    group->reset();
  }
  Tensor u = Tensor::ones({4});
  group->member(0).all_reduce(u, ReduceOp::kSum)->wait();
  EXPECT_EQ(u.to_vector<float>()[0], static_cast<float>(WorkerTransport::world().size()));
}

TEST(MultiWorker, StrategyCountsReplicasOfEveryWorkerAndReducesAcrossThem) {
  REQUIRE_WORKERS();
  const int w = WorkerTransport::world().rank(), W = WorkerTransport::world().size();
  MultiWorkerMirroredStrategy strategy({.local = {.num_cpu_devices = 2, .pin_threads = false}});
  EXPECT_EQ(strategy.num_workers(), W);
  EXPECT_EQ(strategy.worker_index(), w);
  EXPECT_EQ(strategy.is_chief(), w == 0);
  EXPECT_EQ(strategy.num_local_replicas(), 2);
  EXPECT_EQ(strategy.num_replicas_in_sync(), 2 * W);
  auto ids = strategy.run([](ReplicaContext& ctx) { return ctx.replica_id_in_sync_group(); });
  EXPECT_EQ(ids[0], 2 * w);
  EXPECT_EQ(ids[1], 2 * w + 1);
  auto values = strategy.run([](ReplicaContext& ctx) {
    return Tensor::full({3}, static_cast<double>(ctx.replica_id_in_sync_group() + 1));
  });
  const int N = 2 * W;
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, values).to_vector<float>()[0], static_cast<float>(N * (N + 1) / 2));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMax, values).to_vector<float>()[1], static_cast<float>(N));
  // gather: every worker gets every replica's rows in replica order (row counts differ).
  auto rows = strategy.run([](ReplicaContext& ctx) {
    const int g = ctx.replica_id_in_sync_group();
    return Tensor::full({g + 1, 2}, static_cast<double>(g));
  });
  const Tensor all = strategy.gather(rows);
  ASSERT_EQ(all.dim(0), N * (N + 1) / 2);
  EXPECT_EQ(all.to_vector<float>().back(), static_cast<float>(N - 1));
  // One input pipeline per worker.
  data::InputContext seen;
  (void)strategy.distribute_datasets_from_function([&](const data::InputContext& ctx) {
    seen = ctx;
    return data::Dataset::from_tensor_slices(Tensor::zeros({8, 1})).batch(2);
  });
  EXPECT_EQ(seen.num_input_pipelines, W);
  EXPECT_EQ(seen.input_pipeline_id, w);
  EXPECT_EQ(seen.num_replicas_in_sync, N);
}

// The sharded optimizer update (ZeRO stage 1) across workers: each replica of each worker
// updates its shard of every variable, the weights are all-gathered, and each worker's optimizer
// slots hold only its own shards until gathered. What a user relies on: the weights and, once
// gathered, the slots are bit-identical to the unsharded update; a save before the gather is an
// error naming the fix, never a checkpoint with stale slots.
struct ShardedRun {
  std::vector<std::vector<float>> weights, slots;
  bool sharded_over_workers = false;
  bool save_refused = false;
  bool unsharded_refused = false;  // an unsharded exchange before the gather
  std::size_t buckets = 0;
  std::size_t started_early = 0;  // buckets local replica 0 started during backward
};

ShardedRun train_across_workers(int local_devices, bool shard,
                                std::size_t bucket_cap = GradientReducer::kDefaultBucketCapBytes, bool overlap = true) {
  const auto d = test::random_classification(50, 12, 3, 17);
  MultiWorkerMirroredStrategy strategy({.local = {.num_cpu_devices = local_devices,
                                                  .pin_threads = false,
                                                  .bucket_cap_bytes = bucket_cap,
                                                  .shard_optimizer_update = shard,
                                                  .overlap_gradients = overlap}});
  auto scope = strategy.scope();
  set_random_seed(5);
  // 12 -> 16 -> 3: 259 parameters, a prime: every replica count cuts shards inside variables.
  Sequential model({layers::Dense(16, "relu", 12), layers::Dropout(0.2), layers::Dense(3, "softmax")});
  auto opt = optimizers::Adam(1e-2);
  model.compile(opt, losses::SparseCategoricalCrossentropy(), {"accuracy"});
  for (std::int64_t b = 0; b < 50; b += 10) model.train_step(d.x.slice(b, b + 10), d.y.slice(b, b + 10));
  ShardedRun run;
  run.sharded_over_workers = strategy.sharded_update().slots_partial();
  try {
    (void)io::slots_to_save(*opt, model.trainable_variables()[0]);
  } catch (const ValueError& e) {
    run.save_refused = std::string(e.what()).find("gather_optimizer_slots") != std::string::npos;
  }
  run.buckets = strategy.gradient_reducer(0).buckets().size();
  run.started_early = strategy.gradient_reducer(0).buckets_started_early();
  try {
    const auto vars = model.trainable_variables();
    strategy.run_void([&](ReplicaContext& rc) {
      std::vector<Tensor> grads;
      for (const auto& v : vars) grads.push_back(Tensor::zeros(v.shape()));
      rc.all_reduce_gradients(grads, vars);  // sums zeros: no update either way
    });
  } catch (const ReplicaError& e) {
    run.unsharded_refused = std::string(e.what()).find("gather_optimizer_slots") != std::string::npos;
  }
  model.gather_optimizer_slots();
  strategy.check_mirrored(model.variables());
  for (const auto& v : model.variables()) run.weights.push_back(v.value().to_vector<float>());
  for (const auto& v : model.trainable_variables())
    for (const auto& [name, t] : io::slots_to_save(*opt, v))
      run.slots.push_back(t.to_vector<float>());
  return run;
}

// Buckets started during the backward pass cross workers as they do after it: the same
// collectives in the same order, the same bits (128-byte buckets: 4 of them), sharded or not.
TEST(MultiWorker, BucketsStartedDuringBackwardGiveTheSameBitsAsAfterIt) {
  REQUIRE_WORKERS();
  for (int local : {1, 2}) {
    for (bool shard : {true, false}) {
      SCOPED_TRACE(std::to_string(local) + " device(s) per worker, " + (shard ? "sharded" : "unsharded"));
      const ShardedRun after = train_across_workers(local, shard, 128, /*overlap=*/false);
      const ShardedRun during = train_across_workers(local, shard, 128);
      ASSERT_EQ(during.buckets, 4u);
      EXPECT_EQ(after.started_early, 0u);
      EXPECT_EQ(during.started_early, 5 * (during.buckets - 1))
          << "every bucket but the last of the 5 steps starts during backward";
      EXPECT_EQ(during.weights, after.weights);
      EXPECT_EQ(during.slots, after.slots);
    }
  }
}

// Workers need not agree on the overlap: buckets start in bucket order either way. Worker 0 alone
// has MirroredOptions::overlap_gradients false (the ctest entry multi_worker.one_worker_turns_overlap_off
// starts it with LOCKSTEP_TEST_MIXED_OVERLAP=off, the others with =on).
TEST(MultiWorkerMixedOverlap, OneWorkerWithoutTheOverlapTrainsAsNone) {
  REQUIRE_WORKERS();
  const char* mixed_test = std::getenv("LOCKSTEP_TEST_MIXED_OVERLAP");
  if (!mixed_test) GTEST_SKIP() << "run by multi_worker.one_worker_turns_overlap_off";
  const bool off_here = std::string(mixed_test) == "off";  // worker 0
  const ShardedRun mixed = train_across_workers(2, true, 128, /*overlap=*/!off_here);
  EXPECT_EQ(mixed.started_early == 0, off_here) << "each worker overlaps as its own options say";
  const ShardedRun none = train_across_workers(2, true, 128, /*overlap=*/false);
  EXPECT_EQ(none.started_early, 0u);
  EXPECT_EQ(mixed.weights, none.weights);
  EXPECT_EQ(mixed.slots, none.slots);
}

TEST(MultiWorker, ShardedUpdateAcrossWorkersMatchesTheUnshardedOneAndGathersTheSlots) {
  REQUIRE_WORKERS();
  for (int local : {1, 2}) {
    SCOPED_TRACE(std::to_string(local) + " device(s) per worker");
    const ShardedRun sharded = train_across_workers(local, true);
    const ShardedRun whole = train_across_workers(local, false);
    EXPECT_TRUE(sharded.sharded_over_workers);
    EXPECT_TRUE(sharded.save_refused) << "saving slots before the gather must be a ValueError naming the fix";
    EXPECT_TRUE(sharded.unsharded_refused) << "so must an unsharded update of slots held in shards";
    EXPECT_FALSE(whole.sharded_over_workers);
    EXPECT_FALSE(whole.save_refused);
    EXPECT_FALSE(whole.unsharded_refused);
    EXPECT_EQ(sharded.weights, whole.weights);
    EXPECT_EQ(sharded.slots, whole.slots);
  }
}

// TF's reduce and gather along an axis other than the batch's, across workers: replica g holds
// a [2, g + 1] block of value g; gather(axis 1) joins them side by side, reduce(axis 1) sums or
// averages over every element of every replica (mean: over the total count along the axis).
TEST(MultiWorker, ReduceAndGatherAlongAnyAxisSpanTheWorkers) {
  REQUIRE_WORKERS();
  const int W = WorkerTransport::world().size();
  MultiWorkerMirroredStrategy strategy({.local = {.num_cpu_devices = 2, .pin_threads = false}});
  const int N = 2 * W;
  auto blocks = strategy.run([](ReplicaContext& ctx) {
    const int g = ctx.replica_id_in_sync_group();
    return Tensor::full({2, g + 1}, static_cast<double>(g));
  });
  const Tensor all = strategy.gather(blocks, 1);
  ASSERT_EQ(all.shape(), Shape({2, N * (N + 1) / 2}));
  std::vector<float> row;  // g repeated g + 1 times, for g = 0 .. N-1
  for (int g = 0; g < N; ++g) row.insert(row.end(), static_cast<std::size_t>(g + 1), static_cast<float>(g));
  std::vector<float> want = row;
  want.insert(want.end(), row.begin(), row.end());
  EXPECT_EQ(all.to_vector<float>(), want);
  EXPECT_EQ(strategy.gather(blocks, -1).to_vector<float>(), want);
  float total = 0;
  for (float v : row) total += v;
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, blocks, 1).to_vector<float>(), std::vector<float>(2, total));
  const auto mean = strategy.reduce(ReduceOp::kMean, blocks, 1).to_vector<float>();
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_FLOAT_EQ(mean[0], total / static_cast<float>(row.size()));
}

// Keras decides who writes: ModelCheckpoint, TensorBoard and BackupAndRestore with their default
// options write on the chief only. Each worker points them at its own folder (and TensorBoard
// at one shared folder, where event file names differ by process), so any file a non-chief
// wrote would show.
TEST(MultiWorker, CallbacksWithDefaultOptionsWriteOnTheChiefOnly) {
  REQUIRE_WORKERS();
  namespace fs = std::filesystem;
  const int w = WorkerTransport::world().rank();
  MultiWorkerMirroredStrategy strategy({.local = {.num_cpu_devices = 1, .pin_threads = false}});
  const fs::path dir = fs::path(LOCKSTEP_BINARY_DIR) / "mw-default-callbacks";
  if (strategy.is_chief()) fs::remove_all(dir);
  (void)strategy.gather_from_workers("the test's clean start", "");
  const fs::path mine = dir / ("worker-" + std::to_string(w));
  auto scope = strategy.scope();
  set_random_seed(3);
  Sequential model({layers::Dense(4, "relu", 6), layers::Dense(3)});
  model.compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const auto d = test::random_classification(16, 6, 3, 1);
  model.fit(d.x, d.y,
            {.epochs = 2,
             .batch_size = 8,
             .verbose = 0,
             .callbacks = {std::make_shared<ModelCheckpoint>(
                               ModelCheckpointOptions{.filepath = (mine / "ckpt-{epoch}").string(), .monitor = "loss"}),
                           std::make_shared<TensorBoard>(TensorBoardOptions{.log_dir = (dir / "tb").string()}),
                           std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{
                               .backup_dir = (mine / "backup").string(), .delete_checkpoint = false})}});
  (void)strategy.gather_from_workers("the end of fit", "");
  const auto count = [](const fs::path& folder, const std::string& start) {
    int n = 0;
    if (fs::exists(folder))
      for (const auto& e : fs::directory_iterator(folder)) n += e.path().filename().string().starts_with(start);
    return n;
  };
  EXPECT_EQ(count(dir / "worker-0", "ckpt-"), 4);  // ckpt-1 and ckpt-2, .safetensors and .json
  EXPECT_GE(count(dir / "worker-0" / "backup", "backup-"), 2);
  EXPECT_EQ(count(dir / "tb" / "train", "events.out.tfevents."), 1);
  for (int other = 1; other < WorkerTransport::world().size(); ++other)
    EXPECT_FALSE(fs::exists(dir / ("worker-" + std::to_string(other)))) << "worker " << other << " wrote files";
  (void)strategy.gather_from_workers("the test's checks", "");
}

// Whether the update is sharded is decided alike on every worker: one worker with
// MirroredOptions::shard_optimizer_update false (the ctest entry multi_worker.one_worker_turns_sharding_off
// starts worker 0 with LOCKSTEP_TEST_MIXED_SHARD=off, the others with =on) turns it off for all,
// instead of its all-reduce meeting the others' reduce-scatter at the first step.
TEST(MultiWorkerMixedShard, OneWorkerTurningShardingOffTurnsItOffForAll) {
  REQUIRE_WORKERS();
  const char* mixed_test = std::getenv("LOCKSTEP_TEST_MIXED_SHARD");
  if (!mixed_test) GTEST_SKIP() << "run by multi_worker.one_worker_turns_sharding_off";
  const bool off_here = std::string(mixed_test) == "off";  // worker 0
  const ShardedRun asked = train_across_workers(1, /*shard=*/!off_here);
  const ShardedRun whole = train_across_workers(1, false);
  EXPECT_FALSE(asked.sharded_over_workers);
  EXPECT_FALSE(asked.save_refused);
  EXPECT_EQ(asked.weights, whole.weights);
  EXPECT_EQ(asked.slots, whole.slots);
}

}  // namespace
