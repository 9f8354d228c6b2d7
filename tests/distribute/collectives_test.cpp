// Collectives: one suite, run under every CollectiveImplementation. Results are exact and
// bit-identical on every member (and between implementations); failures name the collective
// and the member, and nobody hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "distribute/member_threads.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace std::chrono_literals;

namespace {
constexpr CollectiveImplementation kImplementations[] = {CollectiveImplementation::kSharedMemory,
                                                         CollectiveImplementation::kLoopback};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin};

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "member " << r << " threw: " << e.what();
    }
  }
}

std::string message(const std::exception_ptr& e) {
  if (!e) return "(no exception)";
  try {
    std::rethrow_exception(e);
  } catch (const DistributedError& d) {
    return d.what();
  } catch (const std::exception& x) {
    return std::string("not a DistributedError: ") + x.what();
  }
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

float combine(ReduceOp op, float a, float b) {
  return op == ReduceOp::kMax ? std::max(a, b) : op == ReduceOp::kMin ? std::min(a, b) : a + b;
}

// Integer-valued, so that every order of summation is exact.
float integer_value(int rank, std::int64_t i) { return static_cast<float>((i * 7 + rank * 13) % 29) - 10.0f; }

class Collectives : public testing::TestWithParam<CollectiveImplementation> {
 protected:
  std::unique_ptr<CollectiveGroup> make(int size, std::chrono::milliseconds timeout = 60s) {
    return make_collective_group(GetParam(), size, {.timeout = timeout});
  }
};

INSTANTIATE_TEST_SUITE_P(Implementations, Collectives, testing::ValuesIn(kImplementations),
                         [](const testing::TestParamInfo<CollectiveImplementation>& info) {
                           return std::string(collective_implementation_name(info.param));
                         });
}  // namespace

TEST_P(Collectives, AllReduceIsExactOnEveryMember) {
  for (int n = 1; n <= 4; ++n) {
    auto group = make(n);  // one group per size, reused: its collectives are numbered on
    for (std::int64_t count : {0, 1, 15, 17, 1000003}) {
      for (ReduceOp op : kOps) {
        std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
        expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
          std::vector<float> v(static_cast<std::size_t>(count));
          for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = integer_value(r, i);
          Tensor t = Tensor::from_vector(v, {count});
          EXPECT_TRUE(comm.all_reduce(t, op)->wait());
          got[static_cast<std::size_t>(r)] = t.to_vector<float>();
        }));
        for (std::int64_t i = 0; i < count; ++i) {
          float expect = integer_value(0, i);
          for (int r = 1; r < n; ++r) expect = combine(op, expect, integer_value(r, i));
          if (op == ReduceOp::kMean) expect /= static_cast<float>(n);
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], expect)
                << n << " members, " << count << " elements, " << reduce_op_name(op) << ", member " << r << ", i " << i;
          }
        }
      }
    }
  }
}

TEST_P(Collectives, OtherDtypes) {
  const int n = 3;
  auto group = make(n);
  const std::int64_t count = 37;
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<std::vector<float>> got(n);
      expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
        std::vector<float> v(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((i * 5 + r * 3) % 11);
        Tensor t = Tensor::from_vector(v, {count}).to(dtype);
        comm.all_reduce(t, op)->wait();
        EXPECT_EQ(t.dtype(), dtype);
        got[static_cast<std::size_t>(r)] = t.to(DType::kF32).to_vector<float>();
      }));
      for (std::int64_t i = 0; i < count; ++i) {
        float expect = static_cast<float>((i * 5) % 11);
        for (int r = 1; r < n; ++r) expect = combine(op, expect, static_cast<float>((i * 5 + r * 3) % 11));
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], expect)
              << dtype_name(dtype) << " " << reduce_op_name(op) << " member " << r << " i " << i;
      }
    }
  }
}

TEST_P(Collectives, BitIdenticalOnEveryMemberOnRandomFloats) {
  const int n = 3;
  const std::int64_t count = 100003;
  auto group = make(n);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    std::vector<Tensor> got(n);
    expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
      std::mt19937 rng(static_cast<unsigned>(r + 1));
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> v(static_cast<std::size_t>(count));
      for (auto& x : v) x = d(rng);
      Tensor t = Tensor::from_vector(v, {count});
      comm.all_reduce(t, op)->wait();
      got[static_cast<std::size_t>(r)] = t;
    }));
    for (int r = 1; r < n; ++r) EXPECT_TRUE(got[static_cast<std::size_t>(r)].bitwise_equal(got[0])) << "member " << r;
  }
}

TEST_P(Collectives, ReduceScatter) {
  for (int n : {1, 3}) {
    auto group = make(n);
    for (std::int64_t k : {0, 5}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
        expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
          std::vector<float> v(static_cast<std::size_t>(n * k));
          for (std::int64_t i = 0; i < n * k; ++i) v[static_cast<std::size_t>(i)] = integer_value(r, i);
          Tensor in = Tensor::from_vector(v, {n * k});
          Tensor out = Tensor::zeros({k});
          comm.reduce_scatter(in, out, op)->wait();
          got[static_cast<std::size_t>(r)] = out.to_vector<float>();
        }));
        for (int r = 0; r < n; ++r) {
          for (std::int64_t i = 0; i < k; ++i) {
            float expect = integer_value(0, r * k + i);
            for (int j = 1; j < n; ++j) expect = combine(op, expect, integer_value(j, r * k + i));
            EXPECT_EQ(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], expect) << "member " << r << " i " << i;
          }
        }
      }
    }
  }
}

TEST_P(Collectives, AllGather) {
  const int n = 3;
  const std::int64_t k = 4;
  auto group = make(n);
  std::vector<std::vector<std::int64_t>> got(n);
  expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
    std::vector<std::int64_t> v(k);
    for (std::int64_t i = 0; i < k; ++i) v[static_cast<std::size_t>(i)] = r * 100 + i;
    Tensor in = Tensor::from_vector(v, {k});
    Tensor out = Tensor::zeros({n, k}, DType::kI64);  // any shape with n * k elements
    comm.all_gather(in, out)->wait();
    got[static_cast<std::size_t>(r)] = out.to_vector<std::int64_t>();
  }));
  const std::vector<std::int64_t> expect{0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203};
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)], expect) << "member " << r;
}

TEST_P(Collectives, BroadcastFromEachRoot) {
  const int n = 3;
  auto group = make(n);
  for (int root = 0; root < n; ++root) {
    std::vector<std::vector<float>> got(n);
    expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
      Tensor t = Tensor::full({2, 9}, static_cast<double>(r + 10));
      comm.broadcast(t, root)->wait();
      got[static_cast<std::size_t>(r)] = t.to_vector<float>();
    }));
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(got[static_cast<std::size_t>(r)], std::vector<float>(18, static_cast<float>(root + 10))) << "root " << root;
  }
}

TEST_P(Collectives, BarrierWaitsForEveryMember) {
  const int n = 4;
  auto group = make(n);
  std::atomic<int> arrived{0};
  expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));
    arrived.fetch_add(1);
    comm.barrier()->wait();
    EXPECT_EQ(arrived.load(), n) << "member " << r << " left the barrier early";
  }));
}

TEST_P(Collectives, CollectivesProgressWithoutWait) {
  const int n = 3;
  auto group = make(n);
  std::vector<std::vector<float>> got(n);
  expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
    Tensor t = Tensor::full({1000}, static_cast<double>(r + 1));
    Tensor u = Tensor::full({10}, static_cast<double>(r));
    WorkPtr first = comm.all_reduce(t, ReduceOp::kSum);
    WorkPtr second = comm.broadcast(u, 2);  // queued behind the first, in order
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!(first->is_completed() && second->is_completed()) && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(1ms);  // never waits: the collectives run by themselves
    ASSERT_TRUE(first->is_completed() && second->is_completed()) << "member " << r;
    EXPECT_EQ(first->exception(), nullptr);
    EXPECT_TRUE(first->wait(0ms));
    EXPECT_TRUE(second->wait());
    EXPECT_EQ(u.to_vector<float>(), std::vector<float>(10, 2.0f));
    got[static_cast<std::size_t>(r)] = t.to_vector<float>();
  }));
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)], std::vector<float>(1000, 6.0f));
}

TEST_P(Collectives, DisagreeingArgumentsFailOnEveryMemberAndTheGroupGoesOn) {
  const int n = 3;
  auto group = make(n);
  // Member 2 reduces 12 values where the others reduce 10; then member 1 asks for max.
  for (int round = 0; round < 2; ++round) {
    auto errors = run_members(*group, [&](int r, Communicator& comm) {
      const std::int64_t count = round == 0 && r == 2 ? 12 : 10;
      const ReduceOp op = round == 1 && r == 1 ? ReduceOp::kMax : ReduceOp::kSum;
      Tensor t = Tensor::ones({count});
      comm.all_reduce(t, op)->wait();
    });
    for (int r = 0; r < n; ++r) {
      const std::string m = message(errors[static_cast<std::size_t>(r)]);
      EXPECT_TRUE(contains(m, "all_reduce #" + std::to_string(round + 1))) << m;
      if (round == 0) {
        EXPECT_TRUE(contains(m, "member 0 called all_reduce(10 x float32, sum)")) << m;
        EXPECT_TRUE(contains(m, "member 2 called all_reduce(12 x float32, sum)")) << m;
      } else {
        EXPECT_TRUE(contains(m, "member 1 called all_reduce(10 x float32, max)")) << m;
      }
    }
  }
  // A different kind of collective is a disagreement too.
  auto errors = run_members(*group, [&](int r, Communicator& comm) {
    Tensor t = Tensor::ones({4});
    (r == 0 ? comm.barrier() : comm.broadcast(t, 0))->wait();
  });
  for (const auto& e : errors) EXPECT_TRUE(contains(message(e), "member 0 called barrier()")) << message(e);
  EXPECT_FALSE(group->failed());
  std::vector<float> sums(n);
  expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
    Tensor t = Tensor::full({1}, 1.0);
    comm.all_reduce(t, ReduceOp::kSum)->wait();
    sums[static_cast<std::size_t>(r)] = t.item();
  }));
  EXPECT_EQ(sums, std::vector<float>(n, 3.0f));
}

TEST_P(Collectives, LocalArgumentErrorsThrowAtOnce) {
  auto group = make(2);
  Communicator& comm = group->member(0);
  Tensor undefined;
  Tensor a = Tensor::ones({6}), b = Tensor::ones({4});
  EXPECT_THROW(comm.all_reduce(undefined, ReduceOp::kSum), ValueError);
  EXPECT_THROW(comm.reduce_scatter(a, b, ReduceOp::kSum), ValueError);  // 6 != 2 * 4
  EXPECT_THROW(comm.all_gather(a, b), ValueError);
  EXPECT_THROW(comm.broadcast(a, 2), ValueError);
  EXPECT_THROW(group->member(2), ValueError);
}

TEST_P(Collectives, AMemberThatAbortsReleasesTheOthersNamingIt) {
  const int n = 3;
  auto group = make(n);
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = run_members(*group, [&](int r, Communicator& comm) {
    Tensor t = Tensor::ones({1000});
    if (r == 1) {
      std::this_thread::sleep_for(20ms);  // the others are already waiting
      comm.abort("bad batch on this member");
      return;
    }
    WorkPtr w = comm.all_reduce(t, ReduceOp::kSum);
    try {
      w->wait();
    } catch (...) {
      EXPECT_TRUE(w->is_completed());
      EXPECT_NE(w->exception(), nullptr);
      throw;
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  for (int r : {0, 2}) {
    const std::string m = message(errors[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(contains(m, "all_reduce #1 on member " + std::to_string(r))) << m;
    EXPECT_TRUE(contains(m, "member 1 aborted the group: bad batch on this member")) << m;
  }
  EXPECT_TRUE(group->failed());
  // What failed it is the group's to tell (fit checks it after reading a step's numbers).
  EXPECT_TRUE(contains(group->failure(), "member 1 aborted the group: bad batch on this member")) << group->failure();
  // Later collectives fail at once, until reset().
  Tensor t = Tensor::ones({3});
  EXPECT_TRUE(contains(message([&] {
                         try {
                           group->member(0).all_reduce(t, ReduceOp::kSum)->wait();
                         } catch (...) {
                           return std::current_exception();
                         }
                         return std::exception_ptr();
                       }()),
                       "member 1 aborted"));
  group->reset();
  EXPECT_FALSE(group->failed());
  EXPECT_EQ(group->failure(), "");
  std::vector<float> sums(n);
  expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
    Tensor u = Tensor::full({5}, static_cast<double>(r));
    comm.all_reduce(u, ReduceOp::kSum)->wait();
    sums[static_cast<std::size_t>(r)] = u.to_vector<float>()[4];
  }));
  EXPECT_EQ(sums, std::vector<float>(n, 3.0f));
}

TEST_P(Collectives, AMemberThatNeverArrivesIsNamedByTheTimeout) {
  const int n = 3;
  auto group = make(n, 300ms);
  // Everyone does one collective in step, then member 2 skips the second.
  auto errors = run_members(*group, [&](int r, Communicator& comm) {
    Tensor t = Tensor::ones({64});
    comm.all_reduce(t, ReduceOp::kSum)->wait();
    if (r == 2) return;
    comm.all_reduce(t, ReduceOp::kSum)->wait();
  });
  EXPECT_EQ(errors[2], nullptr);
  for (int r : {0, 1}) {
    const std::string m = message(errors[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(contains(m, "all_reduce #2")) << m;
    EXPECT_TRUE(contains(m, "timed out")) << m;
    EXPECT_TRUE(contains(m, "member(s) 2 never arrived")) << m;
  }
  group->reset();
  expect_no_errors(run_members(*group, [&](int, Communicator& comm) { comm.barrier()->wait(); }));
}

TEST_P(Collectives, WaitWithAShorterTimeoutGivesUpAndAbortsTheGroup) {
  auto group = make(2);
  Tensor t = Tensor::ones({8});
  WorkPtr w = group->member(0).all_reduce(t, ReduceOp::kSum);  // member 1 never comes
  const auto t0 = std::chrono::steady_clock::now();
  try {
    w->wait(100ms);
    FAIL() << "no timeout";
  } catch (const DistributedError& e) {
    EXPECT_TRUE(contains(e.what(), "all_reduce #1 timed out after 100 ms on member 0: member(s) 1 never arrived"))
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_TRUE(group->failed());
  group->reset();  // the abandoned collective fails; the group is in step again
  expect_no_errors(run_members(*group, [&](int, Communicator& comm) { comm.barrier()->wait(); }));
}

TEST(CollectivesAcrossImplementations, BitIdenticalResults) {
  const int n = 4;
  const std::int64_t count = 50001;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (ReduceOp op : kOps) {
      std::vector<Tensor> results;
      for (CollectiveImplementation impl : kImplementations) {
        auto group = make_collective_group(impl, n);
        std::vector<Tensor> got(n);
        expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
          std::mt19937 rng(static_cast<unsigned>(r + 7));
          std::uniform_real_distribution<float> d(-3.0f, 3.0f);
          std::vector<float> v(static_cast<std::size_t>(count));
          for (auto& x : v) x = d(rng);
          Tensor t = Tensor::from_vector(v, {count}).to(dtype);
          comm.all_reduce(t, op)->wait();
          got[static_cast<std::size_t>(r)] = t;
        }));
        for (int r = 1; r < n; ++r) EXPECT_TRUE(got[static_cast<std::size_t>(r)].bitwise_equal(got[0]));
        results.push_back(got[0]);
      }
      EXPECT_TRUE(results[0].bitwise_equal(results[1])) << dtype_name(dtype) << " " << reduce_op_name(op);
    }
  }
}

// ---------------------------------------------------------------------------------------
TEST(GradientBuckets, ReverseOrderCappedByBytesAndSplitByDtype) {
  std::vector<Variable> vars{Variable(Tensor::zeros({10})), Variable(Tensor::zeros({3, 4})),
                             Variable(Tensor::zeros({2}, DType::kF16)), Variable(Tensor::zeros({5})),
                             Variable(Tensor::zeros({100}))};
  const auto one = assign_gradient_buckets(vars, GradientReducer::kDefaultBucketCapBytes);
  ASSERT_EQ(one.size(), 3u);  // f32 {4, 3}, f16 {2}, f32 {1, 0}
  EXPECT_EQ(one[0].variables, (std::vector<std::size_t>{4, 3}));
  EXPECT_EQ(one[0].offsets, (std::vector<std::int64_t>{0, 100}));
  EXPECT_EQ(one[0].numel, 105);
  EXPECT_EQ(one[1].dtype, DType::kF16);
  EXPECT_EQ(one[2].variables, (std::vector<std::size_t>{1, 0}));
  const auto small = assign_gradient_buckets(vars, 64);  // 16 floats
  ASSERT_EQ(small.size(), 5u);  // every gradient alone: the cap or a dtype change splits each pair
  EXPECT_EQ(small[0].variables, (std::vector<std::size_t>{4}));
  EXPECT_EQ(small[1].variables, (std::vector<std::size_t>{3}));
  EXPECT_EQ(small[3].variables, (std::vector<std::size_t>{1}));
}

// Six float32 variables; with 128-byte buckets they fill five: {5, 4}, {3}, {2}, {1}, {0}.
static std::vector<Variable> bucket_test_variables() {
  std::vector<Variable> vars;
  for (std::int64_t k : {7, 33, 1, 64, 5}) vars.emplace_back(Tensor::zeros({k}));
  vars.emplace_back(Tensor::zeros({4, 4}));
  return vars;
}

TEST_P(Collectives, BucketedGradientsEqualOneBucket) {
  const int n = 3;
  auto group = make(n);
  const std::vector<Variable> vars = bucket_test_variables();
  std::vector<std::vector<Tensor>> results;
  for (std::size_t cap : {GradientReducer::kDefaultBucketCapBytes, std::size_t{128}}) {
    std::vector<std::vector<Tensor>> got(n);
    std::vector<GradientReducer> reducers(n, GradientReducer(cap));
    expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
      std::mt19937 rng(static_cast<unsigned>(r));
      std::normal_distribution<float> d;
      std::vector<Tensor> grads;
      for (std::size_t i = 0; i < vars.size(); ++i) {
        if (i == 2 && r == 1) {
          grads.emplace_back();  // undefined: zeros
          continue;
        }
        std::vector<float> v(static_cast<std::size_t>(vars[i].value().numel()));
        for (auto& x : v) x = d(rng);
        grads.push_back(Tensor::from_vector(v, vars[i].shape()));
      }
      for (int step = 0; step < 2; ++step) {  // the second step reuses the cached layout
        std::vector<Tensor> g = grads;
        reducers[static_cast<std::size_t>(r)].all_reduce(comm, g, vars);
        got[static_cast<std::size_t>(r)] = g;
      }
    }));
    EXPECT_EQ(reducers[0].buckets().size(), cap == 128 ? 5u : 1u);
    for (int r = 1; r < n; ++r)
      for (std::size_t i = 0; i < vars.size(); ++i) {
        EXPECT_EQ(got[static_cast<std::size_t>(r)][i].shape(), vars[i].shape());
        EXPECT_TRUE(got[static_cast<std::size_t>(r)][i].bitwise_equal(got[0][i])) << "member " << r << " var " << i;
      }
    results.push_back(got[0]);
  }
  for (std::size_t i = 0; i < vars.size(); ++i) EXPECT_TRUE(results[0][i].bitwise_equal(results[1][i])) << "var " << i;
}

// Gradients handed over one by one during the backward pass (begin / ready / finish): each
// bucket starts once all of its gradients are in and every earlier bucket has started, and the
// sums are those of the exchange after the backward pass, bit for bit.
TEST_P(Collectives, GradientsHandedOverDuringBackwardStartTheirBucketsInOrder) {
  const int n = 3;
  auto group = make(n);
  const std::vector<Variable> vars = bucket_test_variables();
  // 128-byte buckets: {5, 4}, {3}, {2}, {1}, {0}. Handed over in this order, the buckets started
  // after each hand-over are (the last one waits for finish: no backward is left to overlap):
  const std::vector<std::size_t> order{0, 5, 3, 4, 2, 1};
  const std::vector<std::size_t> started{0, 0, 0, 2, 3, 4};
  for (GradientExchange kind : {GradientExchange::kAllReduce, GradientExchange::kReduceScatter}) {
    std::vector<std::vector<Tensor>> after(n), overlapped(n);
    std::vector<std::vector<GradientShard>> shards_after(n), shards_overlapped(n);
    std::vector<GradientReducer> reducers(n, GradientReducer(128));
    expect_no_errors(run_members(*group, [&](int r, Communicator& comm) {
      const auto m = static_cast<std::size_t>(r);
      std::mt19937 rng(static_cast<unsigned>(r));
      std::normal_distribution<float> d;
      std::vector<Tensor> grads;
      for (std::size_t i = 0; i < vars.size(); ++i) {
        std::vector<float> v(static_cast<std::size_t>(vars[i].value().numel()));
        for (auto& x : v) x = d(rng);
        grads.push_back(Tensor::from_vector(v, vars[i].shape()));
      }
      GradientReducer& reducer = reducers[m];
      after[m] = grads;
      if (kind == GradientExchange::kAllReduce) reducer.all_reduce(comm, after[m], vars);
      else reducer.reduce_scatter(comm, grads, vars, shards_after[m]);

      reducer.begin(comm, vars, kind);
      EXPECT_TRUE(reducer.in_progress(vars, kind));
      for (std::size_t j = 0; j < order.size(); ++j) {
        reducer.ready(order[j], grads[order[j]]);
        EXPECT_EQ(reducer.buckets_started(), started[j]) << "after handing over variable " << order[j];
      }
      overlapped[m] = grads;
      if (kind == GradientExchange::kAllReduce) reducer.finish_all_reduce(overlapped[m]);
      else reducer.finish_reduce_scatter(grads, shards_overlapped[m]);
      EXPECT_FALSE(reducer.in_progress(vars, kind));
    }));
    for (int r = 0; r < n; ++r) {
      const auto m = static_cast<std::size_t>(r);
      for (std::size_t i = 0; i < vars.size(); ++i)
        EXPECT_TRUE(overlapped[m][i].bitwise_equal(after[m][i])) << "member " << r << " var " << i;
      ASSERT_EQ(shards_overlapped[m].size(), shards_after[m].size()) << "member " << r;
      for (std::size_t s = 0; s < shards_after[m].size(); ++s) {
        EXPECT_EQ(shards_overlapped[m][s].variable, shards_after[m][s].variable);
        EXPECT_EQ(shards_overlapped[m][s].begin, shards_after[m][s].begin);
        EXPECT_TRUE(shards_overlapped[m][s].grads[0].bitwise_equal(shards_after[m][s].grads[0])) << "member " << r;
      }
    }
    if (kind == GradientExchange::kReduceScatter) {
      EXPECT_FALSE(shards_after[0].empty());
    }
  }
}

// The exchange sums what was handed over: finishing it with other gradients, handing one over
// twice, or finishing one never begun is an error, not a silent wrong sum.
TEST(GradientExchangeErrors, MisuseIsNamed) {
  auto group = make_collective_group(CollectiveImplementation::kSharedMemory, 1, {});
  Communicator& comm = group->member(0);
  std::vector<Variable> vars{Variable(Tensor::zeros({3})), Variable(Tensor::zeros({2}))};
  std::vector<Tensor> grads{Tensor::ones({3}), Tensor::ones({2})};
  GradientReducer reducer;
  EXPECT_THROW(reducer.finish_all_reduce(grads), ValueError);
  reducer.begin(comm, vars, GradientExchange::kAllReduce);
  reducer.ready(1, grads[1]);
  EXPECT_THROW(reducer.ready(1, grads[1]), ValueError);
  EXPECT_THROW(reducer.ready(0, Tensor::ones({4})), ValueError);
  std::vector<Tensor> other{grads[0], Tensor::ones({2})};
  try {
    reducer.finish_all_reduce(other);
    ADD_FAILURE() << "finishing with another gradient did not throw";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "not the one handed over")) << e.what();
  }
  EXPECT_FALSE(reducer.in_progress(vars, GradientExchange::kAllReduce));  // a failed finish ends it
  std::vector<GradientShard> shards;
  reducer.begin(comm, vars, GradientExchange::kAllReduce);
  EXPECT_THROW(reducer.finish_reduce_scatter(grads, shards), ValueError);
}
