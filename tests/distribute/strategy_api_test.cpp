// The strategy API's edges as TF documents them (issue 42): reduce and gather along any axis,
// and strategy.run(fn, args...) passing per-replica and plain values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {

PerReplica<Tensor> per_replica(std::vector<Tensor> values) { return PerReplica<Tensor>(std::move(values)); }

}  // namespace

// tf.distribute.Strategy.gather's documented example: every replica holds [[1], [2]].
TEST(StrategyApi, GatherAlongAxis0And1IsTfsDocumentedExample) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  const auto values = strategy.run([](ReplicaContext&) { return Tensor::from_vector(std::vector<float>{1, 2}, {2, 1}); });
  const Tensor rows = strategy.gather(values, 0);
  EXPECT_EQ(rows.shape(), Shape({4, 1}));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{1, 2, 1, 2}));
  const Tensor columns = strategy.gather(values, 1);
  EXPECT_EQ(columns.shape(), Shape({2, 2}));
  EXPECT_EQ(columns.to_vector<float>(), (std::vector<float>{1, 1, 2, 2}));
  EXPECT_EQ(strategy.gather(values, -1).to_vector<float>(), columns.to_vector<float>());
}

// Lengths along the axis may differ; the other dims may not; the axis must exist.
TEST(StrategyApi, GatherJoinsUnequalLengthsAlongTheAxisAndNamesWhatCannotJoin) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  const auto values = per_replica({Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}),
                                   Tensor::from_vector(std::vector<float>{5, 6, 7, 8, 9, 10}, {2, 3})});
  const Tensor g = strategy.gather(values, 1);
  EXPECT_EQ(g.shape(), Shape({2, 5}));
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 7, 3, 4, 8, 9, 10}));
  const std::string across = test::message_of([&] { (void)strategy.gather(values, 0); });
  EXPECT_NE(across.find("differ only along axis 0"), std::string::npos) << across;
  const std::string out_of_range = test::message_of([&] { (void)strategy.gather(values, 2); });
  EXPECT_NE(out_of_range.find("axis 2 is out of range"), std::string::npos) << out_of_range;
}

// reduce with an axis reduces across the replicas AND along that axis of each replica's value;
// MEAN divides by the total count along it (TF: "the mean over all elements along the axis of
// all replicas"), so replicas with more rows weigh more.
TEST(StrategyApi, ReduceAlongAnAxisSumsOrAveragesOverEveryElementAlongItOfEveryReplica) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  // Replica 0: [[1, 2]], replica 1: [[3, 4], [5, 6]] (3 rows in all).
  const auto rows = per_replica({Tensor::from_vector(std::vector<float>{1, 2}, {1, 2}),
                                 Tensor::from_vector(std::vector<float>{3, 4, 5, 6}, {2, 2})});
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, rows, 0).to_vector<float>(), (std::vector<float>{9, 12}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, rows, 0).to_vector<float>(), (std::vector<float>{3, 4}));
  // Along axis 1 of same-shaped values: each row summed over both replicas' columns.
  const auto cols = per_replica({Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}),
                                 Tensor::from_vector(std::vector<float>{5, 6, 7, 8}, {2, 2})});
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, cols, 1).to_vector<float>(), (std::vector<float>{14, 22}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, cols, 1).to_vector<float>(), (std::vector<float>{3.5f, 5.5f}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, cols, -1).to_vector<float>(), (std::vector<float>{3.5f, 5.5f}));
  // Without an axis: element-wise across the replicas only.
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, cols).to_vector<float>(), (std::vector<float>{6, 8, 10, 12}));
  const std::string bad = test::message_of([&] { (void)strategy.reduce(ReduceOp::kSum, cols, 3); });
  EXPECT_NE(bad.find("axis 3 is out of range"), std::string::npos) << bad;
}

// tf.distribute.Strategy.run(fn, args=(...)): a per-replica argument gives each replica its own
// component, a plain value is passed to every replica as it is; inside, the replica context is
// the replica's.
TEST(StrategyApi, RunPassesEachReplicaItsComponentAndEveryReplicaThePlainValues) {
  MirroredStrategy strategy({.num_cpu_devices = 3});
  const auto ids = strategy.run([](ReplicaContext& ctx) { return ctx.replica_id_in_sync_group(); });
  const Tensor two = Tensor::full({1}, 2.0);
  const auto doubled = strategy.run(
      [](int id, const Tensor& factor, const std::string& tag) {
        const ReplicaContext* ctx = get_replica_context();
        EXPECT_NE(ctx, nullptr);
        EXPECT_EQ(ctx ? ctx->replica_id_in_sync_group() : -1, id);
        EXPECT_EQ(tag, "plain");
        return scale(factor, static_cast<float>(id));
      },
      ids, two, std::string("plain"));
  ASSERT_EQ(doubled.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_FLOAT_EQ(doubled[static_cast<std::size_t>(r)].item(), 2.0f * static_cast<float>(r));
  // Tensors per replica, as TF's inputs * 2 over distributed values; a function returning nothing.
  const auto values = strategy.run([](ReplicaContext& ctx) { return Tensor::full({2}, ctx.local_replica_id() + 1.0); });
  const auto times_two = strategy.run([](const Tensor& x) { return scale(x, 2.0f); }, values);
  EXPECT_EQ(strategy.gather(times_two).to_vector<float>(), (std::vector<float>{2, 2, 4, 4, 6, 6}));
  std::vector<int> seen(3, 0);
  strategy.run([&](int id) { seen[static_cast<std::size_t>(id)] += 1; }, ids);
  EXPECT_EQ(seen, (std::vector<int>{1, 1, 1}));
  // A per-replica value of another strategy (another replica count) is refused, naming both.
  const std::string msg = test::message_of([&] {
    (void)strategy.run([](int id) { return id; }, PerReplica<int>(std::vector<int>{0, 1}));
  });
  EXPECT_NE(msg.find("a PerReplica argument has 2 values, but this worker has 3 replicas"), std::string::npos) << msg;
}
