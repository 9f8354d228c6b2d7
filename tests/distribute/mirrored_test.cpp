// MirroredStrategy: N replicas compute what one device would; failures are reported, never hung on.
#include <gtest/gtest.h>

#include <atomic>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "common/relative_error.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using lockstep::test::max_rel_diff;

namespace {
struct Batches {
  std::vector<Tensor> x, y;
};

// Global batches of the given sizes (the last may be short) from a fixed random problem.
Batches make_batches(const std::vector<std::int64_t>& sizes, std::uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batches b;
  for (auto n : sizes) {
    std::vector<float> xv(static_cast<std::size_t>(n * 20));
    std::vector<std::int64_t> yv(static_cast<std::size_t>(n));
    for (auto& v : xv) v = u(rng);
    for (auto& v : yv) v = static_cast<std::int64_t>(rng() % 5);
    b.x.push_back(Tensor::from_vector(xv, {n, 20}));
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

// Trains on the batches with `replicas` CPU replicas (0: no strategy) and returns the weights.
std::vector<std::vector<float>> train(int replicas, const Batches& b,
                                      CollectiveImplementation impl = CollectiveImplementation::kSharedMemory,
                                      std::size_t bucket_cap_bytes = GradientReducer::kDefaultBucketCapBytes) {
  std::unique_ptr<MirroredStrategy> strategy;
  if (replicas > 0)
    strategy = std::make_unique<MirroredStrategy>(MirroredOptions{
        .num_cpu_devices = replicas, .cross_device_ops = impl, .bucket_cap_bytes = bucket_cap_bytes});
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

// The tests that any implementation of the replicas' collectives must pass.
class MirroredOver : public testing::TestWithParam<CollectiveImplementation> {
 protected:
  MirroredOptions options(int replicas) const { return {.num_cpu_devices = replicas, .cross_device_ops = GetParam()}; }
};
INSTANTIATE_TEST_SUITE_P(CrossDeviceOps, MirroredOver,
                         testing::Values(CollectiveImplementation::kSharedMemory, CollectiveImplementation::kLoopback),
                         [](const testing::TestParamInfo<CollectiveImplementation>& info) {
                           return std::string(collective_implementation_name(info.param));
                         });

bool bit_identical(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t t = 0; t < a.size(); ++t)
    if (a[t].size() != b[t].size() || std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0)
      return false;
  return true;
}

TEST_P(MirroredOver, NReplicasComputeWhatOneDeviceWould) {
  // 7 is not divisible by 2, 3 or 4; the short last batch of 2 leaves replicas with no rows.
  const Batches b = make_batches({12, 7, 12, 9, 2});
  const auto reference = train(0, b);
  for (int n : {1, 2, 3, 4}) {
    const auto w = train(n, b, GetParam());
    EXPECT_LE(max_rel_diff(w, reference), 1e-5) << n << " replicas";
  }
}

TEST_P(MirroredOver, SameSeedSameReplicasIsBitIdentical) {
  const Batches b = make_batches({12, 7, 12});
  EXPECT_TRUE(bit_identical(train(3, b, GetParam()), train(3, b, GetParam())));
}

TEST_P(MirroredOver, SmallGradientBucketsTrainBitIdenticallyToOne) {
  const Batches b = make_batches({12, 7, 12});
  // 64 bytes: every variable's gradient (the smallest has 5 floats) in a bucket of its own.
  EXPECT_TRUE(bit_identical(train(3, b, GetParam(), 64), train(3, b, GetParam())));
  MirroredStrategy strategy({.num_cpu_devices = 2, .cross_device_ops = GetParam(), .bucket_cap_bytes = 64});
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    model = make_model();
  }
  model->train_step(b.x[0], b.y[0]);
  EXPECT_EQ(strategy.gradient_reducer(1).buckets().size(), model->trainable_variables().size());
}

TEST(Mirrored, BothCrossDeviceOpsTrainBitIdentically) {
  const Batches b = make_batches({12, 7, 12, 9, 2});
  for (int n : {2, 3})
    EXPECT_TRUE(bit_identical(train(n, b, CollectiveImplementation::kSharedMemory),
                              train(n, b, CollectiveImplementation::kLoopback)))
        << n << " replicas";
}

TEST(Mirrored, VariablesMadeInScopeAreMirroredAndDriftIsDetected) {
  MirroredStrategy strategy({.num_cpu_devices = 3});
  EXPECT_EQ(strategy.num_replicas_in_sync(), 3);
  auto scope = strategy.scope();
  Variable v(Tensor::from_vector<float>({1, 2, 3}, {3}), "v");
  ASSERT_EQ(v.num_copies(), 3);
  strategy.check_mirrored({v});
  // Each replica sees its own copy.
  auto seen = strategy.run([&](ReplicaContext& ctx) {
    return v.value().raw_data() == v.copy(ctx.replica_id_in_sync_group()).raw_data();
  });
  for (bool s : seen.values()) EXPECT_TRUE(s);
  const_cast<float*>(v.copy(2).data<float>())[1] = 9.0f;
  try {
    strategy.check_mirrored({v});
    FAIL() << "drift not detected";
  } catch (const DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("replica 2"), std::string::npos) << e.what();
  }
}

TEST(Mirrored, ModelBuiltBeforeTheStrategyIsDistributedOnRequest) {
  const Batches b = make_batches({8, 8});
  auto model = make_model();  // no strategy exists yet
  MirroredStrategy strategy({.num_cpu_devices = 2});
  model->distribute(strategy);
  for (const auto& v : model->variables()) EXPECT_EQ(v.num_copies(), 2) << v.name();
  model->train_step(b.x[0], b.y[0]);
  strategy.check_mirrored(model->variables());
  EXPECT_LE(max_rel_diff({model->variables()[0].copy(1).to_vector<float>()},
                         {model->variables()[0].copy(0).to_vector<float>()}),
            0.0);
}

// The optimizer's slots are variables placed like theirs: a model trained before it was
// distributed keeps its momentum (mirrored with the variables, not restarted from zeros), and
// then each replica updates its own copy of them, on its own memory, in step with the others.
TEST(Mirrored, OptimizerSlotsFollowTheirVariablesOntoTheReplicas) {
  const Batches b = make_batches({8, 8});
  auto model = make_model();
  auto opt = optimizers::SGD(0.1, 0.9);
  model->compile(opt, losses::SparseCategoricalCrossentropy());
  model->train_step(b.x[0], b.y[0]);  // no strategy: one copy of everything
  const Variable kernel = model->trainable_variables()[0];
  const auto before = opt->slots(kernel)[0].second.to_vector<float>();
  ASSERT_NE(before, std::vector<float>(before.size(), 0.0f));
  MirroredStrategy strategy({.num_cpu_devices = 2, .shard_optimizer_update = false});
  model->distribute(strategy);
  EXPECT_EQ(opt->slots(kernel)[0].second.to_vector<float>(), before) << "the momentum survives distribute()";
  model->train_step(b.x[1], b.y[1]);
  strategy.check_mirrored(model->variables());
  const auto seen = strategy.run([&](ReplicaContext&) { return opt->slots(kernel)[0].second; });
  EXPECT_NE(seen.values()[0].impl(), seen.values()[1].impl()) << "each replica has its own copy";
  EXPECT_EQ(seen.values()[0].to_vector<float>(), seen.values()[1].to_vector<float>());
  EXPECT_NE(seen.values()[0].to_vector<float>(), before);
}

TEST_P(MirroredOver, ReplicaExceptionReachesCallerWithReplicaIdAndNothingHangs) {
  MirroredStrategy strategy(options(3));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    strategy.run_void([&](ReplicaContext& ctx) {
      if (ctx.replica_id_in_sync_group() == 1) throw ValueError("bad batch on this replica");
      Tensor t = Tensor::ones({4});
      ctx.all_reduce(ReduceOp::kSum, t);  // replicas 0 and 2 wait here for replica 1
    });
    FAIL() << "no exception";
  } catch (const ReplicaError& e) {
    EXPECT_EQ(e.replica_id(), 1);
    EXPECT_NE(std::string(e.what()).find("replica 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad batch on this replica"), std::string::npos) << e.what();
    EXPECT_THROW(std::rethrow_exception(e.nested()), ValueError);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // The strategy is usable again afterwards.
  auto sums = strategy.run([&](ReplicaContext& ctx) {
    return ctx.all_reduce(ReduceOp::kSum, Tensor::full({2}, static_cast<float>(ctx.replica_id_in_sync_group())));
  });
  for (const auto& s : sums.values()) EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST_P(MirroredOver, StalledReplicaIsReportedByTimeout) {
  MirroredOptions o = options(2);
  o.collective_timeout = std::chrono::milliseconds(200);
  MirroredStrategy strategy(o);
  try {
    // Replica 1 stalls until replica 0 has timed out (not for a fixed time: a 300 ms stall lost
    // that race on a loaded machine), then arrives, finds the group aborted and stops.
    std::atomic<bool> timed_out{false};
    strategy.run_void([&](ReplicaContext& ctx) {
      Tensor t = Tensor::ones({4});
      if (ctx.replica_id_in_sync_group() == 0) {
        try {
          ctx.all_reduce(ReduceOp::kSum, t);
        } catch (...) {
          timed_out = true;
          throw;
        }
        return;
      }
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!timed_out && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ctx.all_reduce(ReduceOp::kSum, t);
    });
    FAIL() << "no exception";
  } catch (const DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce #1 timed out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("member(s) 1 never arrived"), std::string::npos) << e.what();
  }
}

// A replica that does not stop after another failed (it waits on something other than a
// collective) makes the strategy unusable: that run, and every later one, names the failure that
// began it, the one a user must fix. The replica still runs after run_void returned, so its
// function captures nothing and is a std::function of static storage: one made in the test's
// frame would be gone by then, and its stack reused while the replica still refers to it
// (ThreadSanitizer reports that race: nothing orders a replica given up on with the caller).
std::atomic<bool> g_release_stuck_replica{false};
const std::function<void(ReplicaContext&)> g_fail_or_get_stuck = [](ReplicaContext& ctx) {
  if (ctx.replica_id_in_sync_group() == 0) throw ValueError("label 7 is outside [0, 2)");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!g_release_stuck_replica && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
};

TEST_P(MirroredOver, AReplicaThatNeverStopsAfterAFailureLeavesTheFailureNamed) {
  MirroredOptions o = options(2);
  o.collective_timeout = std::chrono::milliseconds(200);
  g_release_stuck_replica = false;
  {
    MirroredStrategy strategy(o);
    const std::string cause = "replica 0 failed: label 7 is outside [0, 2)";
    try {
      strategy.run_void(g_fail_or_get_stuck);
      FAIL() << "no exception";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("did not stop within 200 ms after " + cause), std::string::npos)
          << e.what();
    }
    try {
      strategy.run_void([](ReplicaContext&) {});
      FAIL() << "no exception";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("never finished an earlier step (" + cause + ")"), std::string::npos)
          << e.what();
    }
    g_release_stuck_replica = true;  // it finishes, and the strategy joins its thread as it goes
  }
}

TEST(Mirrored, DeviceErrors) {
  EXPECT_THROW(MirroredStrategy({.devices = {"cpu:x"}}), ValueError);
  EXPECT_THROW(MirroredStrategy({.devices = {"tpu:0"}}), ValueError);
  try {
    MirroredStrategy s({.devices = {"gpu:7"}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu:7"), std::string::npos) << e.what();
  }
  try {
    MirroredStrategy s({.devices = {"cpu:0", "cpu:5"}, .num_cpu_devices = 2});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:5"), std::string::npos) << e.what();
  }
  // More logical devices than cores is allowed (with a warning).
  testing::internal::CaptureStderr();
  MirroredStrategy many({.num_cpu_devices = 6});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(many.num_replicas_in_sync(), 6);
  EXPECT_NE(err.find("share"), std::string::npos) << err;
}

TEST(Mirrored, ReduceGatherAndDistributeDataset) {
  MirroredStrategy strategy({.num_cpu_devices = 3});
  auto per = strategy.run([](ReplicaContext& ctx) {
    const float r = static_cast<float>(ctx.replica_id_in_sync_group());
    return Tensor::full({2}, r + 1.0f);
  });
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, per).to_vector<float>(), (std::vector<float>{6, 6}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, per).to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMax, per).to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMin, per).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_FLOAT_EQ(strategy.reduce(ReduceOp::kMean, per, 0).item(), 2.0f);
  EXPECT_EQ(strategy.gather(per).to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3}));

  std::vector<float> xs(7);
  for (int i = 0; i < 7; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i);
  auto ds = data::Dataset::from_tensor_slices(Tensor::from_vector(xs, {7})).batch(5);
  auto it = strategy.experimental_distribute_dataset(ds).make_iterator();
  auto b1 = it->next();
  ASSERT_TRUE(b1);
  EXPECT_EQ(b1->slices[0][0].to_vector<float>(), (std::vector<float>{0, 1}));
  EXPECT_EQ(b1->slices[1][0].to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(b1->slices[2][0].to_vector<float>(), (std::vector<float>{4}));
  EXPECT_EQ(b1->offsets, (std::vector<std::int64_t>{0, 2, 4}));
  auto b2 = it->next();  // the short last batch: 2 rows over 3 replicas
  ASSERT_TRUE(b2);
  EXPECT_EQ(b2->slices[2][0].numel(), 0);
  EXPECT_FALSE(it->next());

  Tensor per_example = Tensor::from_vector<float>({1, 2, 3}, {3});
  EXPECT_FLOAT_EQ(compute_average_loss(per_example, 6).item(), 1.0f);
}

TEST(Mirrored, DistributeDatasetsFromFunctionGivesEachReplicaItsOwnBatch) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  int calls = 0;
  auto dist = strategy.distribute_datasets_from_function([&](const data::InputContext& ctx) {
    ++calls;
    EXPECT_EQ(ctx.num_replicas_in_sync, 2);
    EXPECT_EQ(ctx.num_input_pipelines, 1);
    const std::int64_t per_replica = ctx.get_per_replica_batch_size(4);
    std::vector<float> xs(10);
    for (int i = 0; i < 10; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i);
    return data::Dataset::from_tensor_slices(Tensor::from_vector(xs, {10})).batch(per_replica);
  });
  EXPECT_EQ(calls, 1);
  auto it = dist.make_iterator();
  auto b = it->next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->slices[0][0].to_vector<float>(), (std::vector<float>{0, 1}));
  EXPECT_EQ(b->slices[1][0].to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(b->global_size, 4);
  EXPECT_EQ(b->offsets, (std::vector<std::int64_t>{0, 2}));
  ASSERT_TRUE(it->next());                     // rows 4..7
  testing::internal::CaptureStderr();
  EXPECT_FALSE(it->next());                    // rows 8, 9 feed only replica 0: dropped with a warning
  EXPECT_NE(testing::internal::GetCapturedStderr().find("dropped"), std::string::npos);
}
