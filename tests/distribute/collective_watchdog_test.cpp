// The host side of collectives that run on a device after the host enqueued them (NCCL, which
// needs two GPUs to run): the watchdog's deadline, errors and aborts, driven by fake completions;
// and a group's device completions, joined once by the Work before it completes, with the
// collective started at once by the member's progress thread.
#include "distribute/collective_watchdog.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "distribute/shared_memory_group.hpp"
#include "member_threads.hpp"

namespace lockstep::distribute {
namespace {

using namespace std::chrono_literals;

class FakeCompletion final : public WatchedCompletion {
 public:
  State query(std::string* error) override {
    const int s = state.load();
    if (s == 2) *error = "an illegal memory access was encountered";
    return s == 0 ? State::kPending : s == 1 ? State::kDone : State::kFailed;
  }
  std::atomic<int> state{0};  // 0 pending, 1 done, 2 failed
};

// The group's side: what the watchdog asked of it, on its thread.
struct Group {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> failures;
  std::vector<int> aborts;
  std::atomic<bool> failed{false};

  CollectiveWatchdog::Hooks hooks() {
    return {.failed = [this] { return failed.load(); },
            .fail =
                [this](const std::string& what) {
                  std::lock_guard<std::mutex> lock(mu);
                  failures.push_back(what);
                  failed = true;
                  cv.notify_all();
                },
            .abort =
                [this](int member) {
                  std::lock_guard<std::mutex> lock(mu);
                  aborts.push_back(member);
                  cv.notify_all();
                }};
  }
  /// Waits (up to 20 s) until `n` aborts were asked for.
  bool wait_aborts(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 20s, [&] { return aborts.size() >= n; });
  }
};

Clock::time_point far() { return Clock::now() + 1h; }

TEST(CollectiveWatchdog, HoldsACompletionUntilItPassesAndThenLetsItGo) {
  Group g;
  CollectiveWatchdog dog(g.hooks(), 200us);
  auto c = std::make_shared<FakeCompletion>();
  dog.watch(0, c, far(), "all_reduce #1 over NCCL on member 0", "timed out");
  EXPECT_FALSE(dog.wait_idle(Clock::now() + 20ms));  // still on the device: its buffers are held
  EXPECT_GT(c.use_count(), 1);
  c->state = 1;
  EXPECT_TRUE(dog.wait_idle(Clock::now() + 20s));
  EXPECT_EQ(c.use_count(), 1);
  EXPECT_TRUE(g.failures.empty());
  EXPECT_TRUE(g.aborts.empty());
}

TEST(CollectiveWatchdog, PastItsDeadlineFailsTheGroupOnceAndAbortsItsMember) {
  Group g;
  CollectiveWatchdog dog(g.hooks(), 200us);
  auto first = std::make_shared<FakeCompletion>(), second = std::make_shared<FakeCompletion>();
  auto other = std::make_shared<FakeCompletion>();
  dog.watch(
      1, first, Clock::now() + 30ms, "all_reduce #4 over NCCL on member 1",
      "all_reduce #4 timed out after 30 ms on member 1: every member started it, but it did not complete");
  dog.watch(1, second, Clock::now() + 40ms, "all_reduce #5 over NCCL on member 1", "#5 timed out");
  dog.watch(0, other, far(), "all_reduce #4 over NCCL on member 0", "#4 on 0 timed out");
  ASSERT_TRUE(g.wait_aborts(2));
  // The aborted member's collectives end with it; its peer's, aborted because the group failed.
  EXPECT_FALSE(dog.wait_idle(Clock::now() + 20ms));
  first->state = 1;
  second->state = 1;
  other->state = 1;
  EXPECT_TRUE(dog.wait_idle(Clock::now() + 20s));
  std::lock_guard<std::mutex> lock(g.mu);
  ASSERT_EQ(g.failures.size(), 1u);
  EXPECT_EQ(
      g.failures[0],
      "all_reduce #4 timed out after 30 ms on member 1: every member started it, but it did not complete");
  EXPECT_EQ(g.aborts, (std::vector<int>{1, 0}));
}

TEST(CollectiveWatchdog, ADeviceErrorFailsTheGroupNamingTheCollective) {
  Group g;
  CollectiveWatchdog dog(g.hooks(), 200us);
  auto c = std::make_shared<FakeCompletion>();
  c->state = 2;
  dog.watch(0, c, far(), "reduce_scatter #2 over NCCL on member 0", "timed out");
  ASSERT_TRUE(g.wait_aborts(1));
  EXPECT_TRUE(dog.wait_idle(Clock::now() + 20s));  // it will not pass: let go
  std::lock_guard<std::mutex> lock(g.mu);
  ASSERT_EQ(g.failures.size(), 1u);
  EXPECT_EQ(g.failures[0],
            "reduce_scatter #2 over NCCL on member 0: an illegal memory access was encountered");
  EXPECT_EQ(g.aborts, std::vector<int>{0});
}

TEST(CollectiveWatchdog, AGroupFailedElsewhereAbortsOnlyTheMembersWithWorkOnTheDevice) {
  Group g;
  CollectiveWatchdog dog(g.hooks(), 200us);
  auto a = std::make_shared<FakeCompletion>(), b = std::make_shared<FakeCompletion>();
  dog.watch(2, a, far(), "all_gather #7 over NCCL on member 2", "timed out");
  dog.watch(0, b, far(), "all_gather #7 over NCCL on member 0", "timed out");
  b->state = 1;
  ASSERT_TRUE(dog.wait_idle(Clock::now() + 20ms) == false);
  g.failed = true;  // a peer never arrived, on the host
  ASSERT_TRUE(g.wait_aborts(1));
  a->state = 1;
  EXPECT_TRUE(dog.wait_idle(Clock::now() + 20s));
  std::lock_guard<std::mutex> lock(g.mu);
  EXPECT_TRUE(g.failures.empty());  // the first failure is the one reported
  EXPECT_EQ(g.aborts, std::vector<int>{2});
}

TEST(CollectiveWatchdog, DestroyedWithWorkOutstandingItReturns) {
  Group g;
  auto c = std::make_shared<FakeCompletion>();
  {
    CollectiveWatchdog dog(g.hooks(), 200us);
    dog.watch(0, c, far(), "broadcast #1 over NCCL on member 0", "timed out");
  }
  EXPECT_EQ(c.use_count(), 1);
  EXPECT_TRUE(g.failures.empty());
}

// ---------------------------------------------------------------------------------------
// A group whose collectives complete on a "device": prepare() gives each a completion that
// counts its joins, and asks for the collective to start at once.
class CountingCompletion final : public DeviceCompletion {
 public:
  void join(ComputeContext&) override { ++joins; }
  std::atomic<int> joins{0};
};

class DeviceLikeGroup final : public SharedMemoryGroup {
 public:
  explicit DeviceLikeGroup(int size) : SharedMemoryGroup(size, {.timeout = 60s}) {}
  std::atomic<int> runs{0};
  std::vector<std::shared_ptr<CountingCompletion>> completions{
      std::vector<std::shared_ptr<CountingCompletion>>(2)};

 protected:
  bool prepare(int rank, CollectiveCall& call) override {
    auto c = std::make_shared<CountingCompletion>();
    completions[static_cast<std::size_t>(rank)] = c;  // one collective per member
    call.device = c;
    return true;
  }
  void run(int rank, const CollectiveCall& call, const Deadline& deadline) override {
    SharedMemoryGroup::run(rank, call, deadline);
    ++runs;
  }
};

TEST(DeviceCompletion, TheCollectiveStartsAtOnceAndItsWorkJoinsItOnce) {
  DeviceLikeGroup group(2);
  std::atomic<bool> ran_unasked[2] = {false, false};
  const auto errors = run_members(group, [&](int r, Communicator& c) {
    Tensor t = Tensor::full({5}, static_cast<double>(r + 1));
    WorkPtr w = c.all_reduce(t, ReduceOp::kSum);
    // Nobody waits for it nor polls it: the progress threads run it.
    const auto until = Clock::now() + 20s;
    while (group.runs.load() < 2 && Clock::now() < until) std::this_thread::sleep_for(1ms);
    ran_unasked[r] = group.runs.load() == 2;
    auto& completion = *group.completions[static_cast<std::size_t>(r)];
    EXPECT_EQ(completion.joins.load(), 0);  // not before the Work says it completed
    EXPECT_TRUE(w->is_completed());
    EXPECT_EQ(completion.joins.load(), 1);
    w->wait();
    EXPECT_TRUE(w->is_completed());
    EXPECT_EQ(completion.joins.load(), 1);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(5, 3.0f));
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  EXPECT_TRUE(ran_unasked[0] && ran_unasked[1]);
}

}  // namespace
}  // namespace lockstep::distribute
