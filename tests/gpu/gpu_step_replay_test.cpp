// fit's replays of captured train steps (training/step_replay.hpp) on a GPU: a step captured once
// per input signature replays on each new slice the bits the step gives eagerly, its state
// updated in place; each step's numbers are its own (copied out of the graph's outputs); past
// the bound a signature runs eagerly, said once; a capture that fails runs the step eagerly and
// names why. CI runs them on emulated GPUs.
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "training/step_replay.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
// The host numbers the steps take beside their slices (StepTerms::key).
const std::array<std::int64_t, 1> kKey{7};

// A step: a loss over x @ w and a metric state, and w updated in place as an optimizer does.
struct Toy {
  Tensor w;
  detail::ReplicaNumbers operator()(const data::Element& in) {
    const Tensor y = relu(matmul(in[0], w));
    detail::ReplicaNumbers r;
    r.loss_sum = sum(y);
    r.metric_states = {sum(in[0])};
    w.copy_from(sub(w, scale(matmul(in[0], y, /*transpose_a=*/true), 1e-3f)));
    return r;
  }
};

std::vector<float> host(const Tensor& t) { return t.to_vector<float>(); }

// On gpu:0, a Toy whose steps are replayed and one that runs the same steps eagerly from the same
// weights.
struct ReplayedAndEager {
  OnGpu0 on;
  Toy replayed{test::random_uniform({8, 8}, 1).to(on.gpu)}, eager{replayed.w.clone()};
  detail::StepReplays replays;

  // One step of each on a slice of `rows` x 8 (drawn from `seed`): the replayed step's numbers,
  // expected to be the eager step's.
  detail::ReplicaNumbers step(std::int64_t rows, std::uint64_t seed) {
    const data::Element slice{test::random_uniform({rows, 8}, seed).to(on.gpu)};
    detail::ReplicaNumbers got = replays.run(slice, kKey, [&](const data::Element& in) { return replayed(in); });
    const detail::ReplicaNumbers want = eager(slice);
    EXPECT_EQ(host(got.loss_sum), host(want.loss_sum)) << seed;
    EXPECT_EQ(host(got.metric_states[0]), host(want.metric_states[0])) << seed;
    return got;
  }
};

}  // namespace

TEST(GpuStepReplay, ReplaysGiveTheEagerBitsAndEachStepItsOwnNumbers) {
  LOCKSTEP_REQUIRE_GPU();
  ReplayedAndEager toys;
  std::vector<detail::ReplicaNumbers> kept;
  for (std::uint64_t seed = 2; seed < 8; ++seed) {
    kept.push_back(toys.step(seed % 2 ? 8 : 4, seed));  // two signatures
    EXPECT_EQ(host(toys.replayed.w), host(toys.eager.w)) << seed;
  }
  EXPECT_EQ(toys.replays.graphs(), 2u);
  EXPECT_EQ(toys.replays.failure(), "");
  // Steps 0 and 2 replayed one graph: each kept its own loss.
  EXPECT_NE(host(kept[0].loss_sum), host(kept[2].loss_sum));
}

// A replayed step's numbers that its caller dropped (merged) take the next step's: each step
// still reads its own, in the earlier step's copy.
TEST(GpuStepReplay, NumbersNoOneHoldsAreReusedForTheNextStep) {
  LOCKSTEP_REQUIRE_GPU();
  ReplayedAndEager toys;
  std::vector<float> previous;
  std::uint64_t copy = 0;
  for (std::uint64_t seed = 2; seed < 8; ++seed) {
    const detail::ReplicaNumbers got = toys.step(8, seed);
    EXPECT_NE(host(got.loss_sum), previous) << seed;
    previous = host(got.loss_sum);
    // From the second step on, the copy is the one before's (a tensor's id is never reused).
    if (seed > 2) {
      EXPECT_EQ(got.loss_sum.id(), copy) << seed;
    }
    copy = got.loss_sum.id();
  }
}

TEST(GpuStepReplay, PastTheBoundASignatureRunsEagerlySaidOnce) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  Toy toy{test::random_uniform({4, 4}, 1).to(gpu)};
  detail::StepReplays replays;
  ::testing::internal::CaptureStderr();
  for (std::size_t i = 0; i < detail::StepReplays::kMaxGraphs + 2; ++i) {
    const data::Element slice{test::random_uniform({4, 4}, 3).to(gpu)};
    (void)replays.run(slice, std::array<std::int64_t, 1>{static_cast<std::int64_t>(i)}, [&](const data::Element& in) { return toy(in); });
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(replays.graphs(), detail::StepReplays::kMaxGraphs);
  EXPECT_TRUE(has(err, "input signatures have captured train steps; steps of other signatures run eagerly"))
      << err;
  EXPECT_EQ(err.find("jit_compile", 1), std::string::npos) << err;  // once
}

TEST(GpuStepReplay, ACaptureThatFailsRunsTheStepEagerlyAndSaysWhy) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  detail::StepReplays replays;
  int calls = 0;
  const auto step = [&](const data::Element& in) {
    ++calls;
    detail::ReplicaNumbers r;
    const float total = host(sum(in[0]))[0];  // read on the host: a capture cannot
    r.loss_sum = Tensor::scalar(total).to(gpu);
    return r;
  };
  const data::Element slice{Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).to(gpu)};
  ::testing::internal::CaptureStderr();
  const detail::ReplicaNumbers r = replays.run(slice, {}, step);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(host(r.loss_sum), std::vector<float>{6});
  EXPECT_EQ(replays.graphs(), 0u);
  EXPECT_TRUE(has(err, "jit_compile: the train step could not be captured, so train steps run eagerly"))
      << err;
  EXPECT_FALSE(replays.failure().empty());
  (void)replays.run(slice, {}, step);  // eagerly, no second capture
  EXPECT_EQ(calls, 3);
}

// Logical replicas of one GPU (lanes) capture their steps as one graph: each lane's replays give
// its eager bits. A capture that fails on one lane (a host read there) fails the step on every
// lane, naming why once (the caller runs the step again), and each lane says its capture was
// discarded; every later step runs eagerly.
TEST(GpuStepReplay, LanesCaptureTogetherAndACaptureThatFailsOnOneLaneFailsTheStep) {
  LOCKSTEP_REQUIRE_GPU();
  distribute::MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  distribute::CollectiveGroup* group = &strategy.collectives();
  const auto lanes = [&] {
    return std::make_unique<LaneMeeting>(2, std::chrono::seconds(60), [group] { return group->failed(); });
  };
  const Device gpu = Device::parse("gpu:0");
  detail::StepReplays replays("train", lanes());
  std::vector<Toy> replayed(2), eager(2);
  strategy.run_void([&](distribute::ReplicaContext& rc) {
    const auto l = static_cast<std::size_t>(rc.local_replica_id());
    replayed[l].w = test::random_uniform({8, 8}, 1 + l).to(gpu);
    eager[l].w = replayed[l].w.clone();
  });
  for (std::uint64_t seed = 2; seed < 6; ++seed) {
    replays.begin_step();
    strategy.run_void([&](distribute::ReplicaContext& rc) {
      const int l = rc.local_replica_id();
      const auto i = static_cast<std::size_t>(l);
      const data::Element slice{test::random_uniform({4, 8}, seed * 2 + i).to(gpu)};
      const detail::ReplicaNumbers got =
          replays.run(l, slice, kKey, [&](const data::Element& in) { return replayed[i](in); });
      const detail::ReplicaNumbers want = eager[i](slice);
      EXPECT_EQ(host(got.loss_sum), host(want.loss_sum)) << seed << " lane " << l;
      EXPECT_EQ(host(replayed[i].w), host(eager[i].w)) << seed << " lane " << l;
    });
  }
  EXPECT_EQ(replays.graphs(), 1u);
  EXPECT_EQ(replays.failure(), "");

  detail::StepReplays failing("train", lanes());
  int calls[2] = {0, 0};
  std::atomic<int> discarded{0};  // each lane whose capture was discarded says so (the optimizer forgets the step)
  const auto step = [&](int l, const data::Element& in) {
    ++calls[l];
    detail::ReplicaNumbers r;
    r.loss_sum = sum(in[0]);
    if (l == 1) (void)host(r.loss_sum);  // lane 1 reads on the host: a capture cannot
    return r;
  };
  const auto run = [&] {
    failing.begin_step();
    strategy.run_void([&](distribute::ReplicaContext& rc) {
      const int l = rc.local_replica_id();
      const data::Element slice{Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).to(gpu)};
      (void)failing.run(l, slice, {}, [&](const data::Element& in) { return step(l, in); }, [&] { ++discarded; });
    });
  };
  ::testing::internal::CaptureStderr();
  const std::string msg = message_of(run);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(msg, "replica 1 of 2") || has(msg, "lane 1 failed")) << msg;  // whichever stopped first
  EXPECT_TRUE(has(msg, "from the device to the host inside a graph capture on gpu:0")) << msg;
  EXPECT_TRUE(has(failing.failure(), "from the device to the host")) << failing.failure();
  EXPECT_EQ(discarded.load(), 2);
  EXPECT_TRUE(has(err, "jit_compile: the train step could not be captured, so train steps run eagerly")) << err;
  EXPECT_EQ(err.find("jit_compile", 1), std::string::npos) << err;  // once
  run();  // eagerly on both lanes, no second capture
  EXPECT_EQ(calls[0], 2);
  EXPECT_EQ(calls[1], 2);
  EXPECT_EQ(discarded.load(), 2);  // no capture the second time
  EXPECT_EQ(failing.graphs(), 0u);
}

// Lanes meet once a replayed step: each lane replays the graph its signature had last, and that
// one meeting checks that every lane's is the step's. A lane whose signature changes is found
// there: the lanes then capture the graph of their new joint signature (and meet for it), and
// the step after, whose lanes guess different graphs, is replayed from the right one. Every
// step gives each lane its eager bits.
TEST(GpuStepReplay, LanesMeetOnceAReplayedStepAndFindANewSignatureInThatMeeting) {
  LOCKSTEP_REQUIRE_GPU();
  distribute::MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  distribute::CollectiveGroup* group = &strategy.collectives();
  auto meeting = std::make_unique<LaneMeeting>(2, std::chrono::seconds(60), [group] { return group->failed(); });
  const LaneMeeting& met = *meeting;
  const Device gpu = Device::parse("gpu:0");
  detail::StepReplays replays("train", std::move(meeting));
  std::vector<Toy> replayed(2), eager(2);
  strategy.run_void([&](distribute::ReplicaContext& rc) {
    const auto l = static_cast<std::size_t>(rc.local_replica_id());
    replayed[l].w = test::random_uniform({8, 8}, 1 + l).to(gpu);
    eager[l].w = replayed[l].w.clone();
  });
  // Rows of each lane's slice per step: lane 1's change at the fifth step and back at the sixth.
  const std::vector<std::array<std::int64_t, 2>> rows{{4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 3}, {4, 4}, {4, 4}};
  std::vector<std::uint64_t> meetings;
  for (std::size_t step = 0; step < rows.size(); ++step) {
    const std::uint64_t before = met.meetings();
    replays.begin_step();
    strategy.run_void([&](distribute::ReplicaContext& rc) {
      const int l = rc.local_replica_id();
      const auto i = static_cast<std::size_t>(l);
      const data::Element slice{test::random_uniform({rows[step][i], 8}, step * 2 + i).to(gpu)};
      const detail::ReplicaNumbers got =
          replays.run(l, slice, kKey, [&](const data::Element& in) { return replayed[i](in); });
      const detail::ReplicaNumbers want = eager[i](slice);
      EXPECT_EQ(host(got.loss_sum), host(want.loss_sum)) << step << " lane " << l;
      EXPECT_EQ(host(replayed[i].w), host(eager[i].w)) << step << " lane " << l;
    });
    meetings.push_back(met.meetings() - before);
  }
  // A capture meets three times (the fork, the join, its end), its first replay once, after the
  // one meeting that found no graph to replay.
  EXPECT_EQ(meetings, (std::vector<std::uint64_t>{5, 1, 1, 1, 5, 2, 1}));
  EXPECT_EQ(replays.graphs(), 2u);
  EXPECT_EQ(replays.failure(), "");
}
