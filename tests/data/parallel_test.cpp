// The threaded stages: parallel map (order, errors, autotune), prefetch, interleave, and that
// destroying an iterator mid-pass stops their threads promptly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "lockstep/data/function_error.hpp"
#include "lockstep/data/thread_budget.hpp"
#include "lockstep/tensor/ops.hpp"
#include "pipeline_util.hpp"

using namespace lockstep;
using data::Dataset;
using data::Element;
using data::kAutotune;
using test::ints;
using test::iota_vec;
using Clock = std::chrono::steady_clock;

namespace {

// A map that sleeps a pseudo-random 0..3 ms per element, so that elements finish out of order.
data::MapFn jittery(std::int64_t scale = 1) {
  return [scale](Element e) {
    const auto v = test::value(e);
    std::this_thread::sleep_for(std::chrono::microseconds((v * 7919) % 3000));
    return Element{test::scalar_i64(v * scale)};
  };
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TEST(DataParallelMap, DeterministicEqualsSequentialOrder) {
  const Dataset in = Dataset::range(200);
  const auto sequential = ints(in.map(jittery(3)));
  EXPECT_EQ(sequential.size(), 200u);
  for (std::int64_t p : {std::int64_t{2}, std::int64_t{4}, kAutotune}) EXPECT_EQ(ints(in.map(jittery(3), p)), sequential) << p;
}

TEST(DataParallelMap, NondeterministicYieldsEveryElementOnce) {
  const auto got = ints(Dataset::range(200).map(jittery(), 4, /*deterministic=*/false));
  const auto want = iota_vec(0, 200);
  EXPECT_EQ(std::multiset<std::int64_t>(got.begin(), got.end()), std::multiset<std::int64_t>(want.begin(), want.end()));
}

TEST(DataParallelMap, CardinalityAndEmptyInput) {
  EXPECT_EQ(Dataset::range(7).map(jittery(), 3).cardinality(), 7);
  EXPECT_TRUE(ints(Dataset::range(0).map(jittery(), 3)).empty());
  EXPECT_TRUE(ints(Dataset::range(0).map(jittery(), kAutotune, false)).empty());
}

TEST(DataParallelMap, ThrowNamesTheElementIndex) {
  for (std::int64_t p : {std::int64_t{1}, std::int64_t{3}, kAutotune}) {
    for (bool det : {true, false}) {
      const Dataset ds = Dataset::range(50).map(
          [](Element e) {
            if (test::value(e) == 17) throw std::runtime_error("bad pixel");
            return e;
          },
          p, det);
      try {
        ints(ds);
        FAIL() << p;
      } catch (const data::FunctionError& e) {
        EXPECT_EQ(e.element_index(), 17) << p;
        EXPECT_EQ(e.transformation(), "Dataset::map");
        EXPECT_NE(std::string(e.what()).find("element 17"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bad pixel"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(DataParallelMap, UpstreamErrorPassesThrough) {
  const Dataset bad = Dataset::from_generator([] {
    return data::Generator([i = 0]() mutable -> std::optional<Element> {
      if (i == 5) throw ValueError("upstream broke");
      return Element{test::scalar_i64(i++)};
    });
  });
  auto it = bad.map(jittery(), 3).make_iterator();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(test::value(*it->next()), i);
  EXPECT_THROW(it->next(), data::FunctionError);  // the generator's own error, with its index
  EXPECT_FALSE(it->next());
}

TEST(DataParallelMap, TensorOpsInsideMapRunOnTheInputContext) {
  const Tensor x = Tensor::from_vector<float>(std::vector<float>(64 * 100, 2.f), {100, 64});
  const Dataset ds = Dataset::from_tensor_slices(x).map([](Element e) { return Element{mul(e[0], e[0])}; }, 4);
  float sum = 0;
  for (auto& e : ds.batch(10)) sum += lockstep::sum(e[0]).item();
  EXPECT_FLOAT_EQ(sum, 4.f * 64 * 100);
}

TEST(DataParallelMap, AutotuneStaysWithinTheBudget) {
  auto& budget = data::ThreadBudget::process();
  const int before = budget.input_in_use();
  {
    auto it = Dataset::range(1000).map(jittery(), kAutotune).make_iterator();
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(it->next());
    EXPECT_LE(budget.input_in_use(), std::max(budget.input_capacity(), before + 1));
  }
  EXPECT_EQ(budget.input_in_use(), before);  // the lease came back
}

TEST(DataPrefetch, OrderErrorsAndCardinality) {
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{3}, kAutotune}) {
    EXPECT_EQ(ints(Dataset::range(100).map(jittery(), 2).prefetch(n)), iota_vec(0, 100)) << n;
  }
  EXPECT_EQ(ints(Dataset::range(5).prefetch(0)), iota_vec(0, 5));
  EXPECT_EQ(Dataset::range(5).prefetch(2).cardinality(), 5);
  EXPECT_THROW(Dataset::range(5).prefetch(-2), ValueError);
  const Dataset bad = Dataset::range(10).map([](Element e) {
    if (test::value(e) == 6) throw std::runtime_error("nope");
    return e;
  });
  auto it = bad.prefetch(4).make_iterator();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(it->next());
  EXPECT_THROW(it->next(), data::FunctionError);
  EXPECT_FALSE(it->next());
}

TEST(DataPrefetch, DestroyingMidPassReturnsPromptly) {
  // An endless pipeline of slow elements, several threaded stages deep.
  const Dataset ds = Dataset::range(0, INT64_MAX)
                         .map(jittery(), kAutotune)
                         .prefetch(8)
                         .interleave([](const Element& e) { return Dataset::range(test::value(e), test::value(e) + 3); },
                                     2, 1, 2)
                         .map(jittery(), 3, false)
                         .prefetch(kAutotune);
  for (int round = 0; round < 5; ++round) {
    auto it = ds.make_iterator();
    for (int i = 0; i < 10 + round; ++i) ASSERT_TRUE(it->next());
    const auto t0 = Clock::now();
    it.reset();
    EXPECT_LT(seconds_since(t0), 0.5);
  }
  // And an iterator never pulled from, and one made by range-for and abandoned.
  { auto it = ds.make_iterator(); }
  for (auto& e : ds) {
    (void)e;
    break;
  }
}

TEST(DataInterleave, OrderMatchesTfAndIsDeterministicInParallel) {
  // Input 0..3; element k gives k repeated (k + 1) times. cycle 2, block 2 (tf.data's doc example shape).
  const auto fn = [](const Element& e) {
    const auto k = test::value(e);
    return Dataset::range(k + 1).map([k](Element) { return Element{test::scalar_i64(k)}; });
  };
  const Dataset in = Dataset::range(4);
  const std::vector<std::int64_t> want{0, 1, 1, 2, 2, 2, 3, 3, 3, 3};  // worked by hand from tf's state machine
  EXPECT_EQ(ints(in.interleave(fn, 2, 2)), want);
  for (std::int64_t p : {std::int64_t{2}, std::int64_t{4}, kAutotune}) EXPECT_EQ(ints(in.interleave(fn, 2, 2, p)), want) << p;
  EXPECT_EQ(in.interleave(fn, 2, 2).cardinality(), data::kUnknownCardinality);
  // With jitter, many files, parallel: the same as sequential.
  const auto slow = [](const Element& e) { return Dataset::range(test::value(e) * 10, test::value(e) * 10 + 7).map(jittery()); };
  const auto seq = ints(Dataset::range(12).interleave(slow, 3, 2));
  EXPECT_EQ(seq.size(), 84u);
  EXPECT_EQ(ints(Dataset::range(12).interleave(slow, 3, 2, 3)), seq);
  EXPECT_EQ(ints(Dataset::range(12).interleave(slow, kAutotune, 2, kAutotune)).size(), 84u);
}

TEST(DataInterleave, FunctionErrorNamesInputElement) {
  const Dataset ds = Dataset::range(5).interleave(
      [](const Element& e) {
        if (test::value(e) == 3) throw std::runtime_error("missing file");
        return Dataset::range(2);
      },
      2, 1, 2);
  try {
    ints(ds);
    FAIL();
  } catch (const data::FunctionError& e) {
    EXPECT_EQ(e.element_index(), 3);
    EXPECT_NE(std::string(e.what()).find("missing file"), std::string::npos);
  }
}

TEST(DataThreadBudget, Policy) {
  data::ThreadBudget b(4);
  EXPECT_EQ(b.input_capacity(), 4);
  {
    auto compute = b.reserve_compute(3);
    EXPECT_EQ(b.input_capacity(), 1);
    auto a = b.acquire_input(8);
    EXPECT_EQ(a.count(), 1);
    auto c = b.acquire_input(2);  // past the budget, yet at least one: progress
    EXPECT_EQ(c.count(), 1);
    EXPECT_TRUE(c.should_shrink() == false);  // it holds only its minimum
    EXPECT_FALSE(a.try_grow());
  }
  EXPECT_EQ(b.compute_reserved(), 0);
  EXPECT_EQ(b.input_in_use(), 0);
  auto a = b.acquire_input(8);
  EXPECT_EQ(a.count(), 4);
  auto compute = b.reserve_compute(2);  // training starts later: the stage must give back
  EXPECT_TRUE(a.should_shrink());
  a.shrink();
  a.shrink();
  EXPECT_FALSE(a.should_shrink());
  EXPECT_EQ(b.input_in_use(), 2);
}
