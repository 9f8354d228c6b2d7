// Sources and sequential transformations: generator, range, zip, concatenate, filter,
// unbatch, skip, enumerate, shard, and their cardinalities.
#include <gtest/gtest.h>

#include <set>

#include "lockstep/data/function_error.hpp"
#include "pipeline_util.hpp"

using namespace lockstep;
using data::Dataset;
using data::Element;
using test::ints;
using test::iota_vec;

namespace {

Dataset counting_generator(std::int64_t n, int* passes = nullptr) {
  return Dataset::from_generator([n, passes] {
    if (passes) ++*passes;
    return data::Generator([i = std::int64_t{0}, n]() mutable -> std::optional<Element> {
      if (i >= n) return std::nullopt;
      return Element{test::scalar_i64(i++)};
    });
  });
}

}  // namespace

TEST(DataPipeline, GeneratorFreshEachPass) {
  int passes = 0;
  const Dataset ds = counting_generator(5, &passes);
  EXPECT_EQ(ds.cardinality(), data::kUnknownCardinality);
  EXPECT_EQ(ints(ds), iota_vec(0, 5));
  EXPECT_EQ(ints(ds.repeat(2)), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_EQ(passes, 3);
}

TEST(DataPipeline, GeneratorThrowNamesIndex) {
  const Dataset ds = Dataset::from_generator([] {
    return data::Generator([i = 0]() mutable -> std::optional<Element> {
      if (i == 3) throw std::runtime_error("sensor unplugged");
      return Element{test::scalar_i64(i++)};
    });
  });
  auto it = ds.make_iterator();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(it->next());
  try {
    it->next();
    FAIL();
  } catch (const data::FunctionError& e) {
    EXPECT_EQ(e.element_index(), 3);
    EXPECT_NE(std::string(e.what()).find("sensor unplugged"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(it->next());
}

TEST(DataPipeline, Range) {
  EXPECT_EQ(ints(Dataset::range(5)), iota_vec(0, 5));
  EXPECT_EQ(ints(Dataset::range(2, 11, 3)), (std::vector<std::int64_t>{2, 5, 8}));
  EXPECT_EQ(ints(Dataset::range(5, 0, -2)), (std::vector<std::int64_t>{5, 3, 1}));
  EXPECT_EQ(Dataset::range(2, 11, 3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(5, 5).cardinality(), 0);
  EXPECT_EQ(Dataset::range(5, 0).cardinality(), 0);
  EXPECT_EQ(Dataset::range(INT64_MIN, INT64_MAX, INT64_MAX).cardinality(), 3);
  EXPECT_THROW(Dataset::range(0, 5, 0), ValueError);
  for (auto& e : Dataset::range(1)) EXPECT_EQ(e[0].shape(), Shape{});
}

TEST(DataPipeline, ZipFlattensAndStopsAtShortest) {
  const Tensor y = Tensor::from_vector<float>({10, 11, 12}, {3});
  const Dataset ds = Dataset::zip({Dataset::range(5), Dataset::from_tensor_slices(y)});
  EXPECT_EQ(ds.cardinality(), 3);
  int i = 0;
  for (auto& e : ds) {
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(test::value(e), i);
    EXPECT_EQ(e[1].item(), 10.f + i);
    ++i;
  }
  EXPECT_EQ(i, 3);
  EXPECT_EQ(Dataset::zip({Dataset::range(3).repeat(), Dataset::range(4)}).cardinality(), 4);
  EXPECT_EQ(Dataset::zip({Dataset::range(3).repeat(), counting_generator(2)}).cardinality(), data::kUnknownCardinality);
}

TEST(DataPipeline, ZipRejectsChangingDtype) {
  const Dataset odd = Dataset::from_generator([] {
    return data::Generator([i = 0]() mutable -> std::optional<Element> {
      if (i == 3) return std::nullopt;
      return Element{i++ == 1 ? Tensor::scalar(1.f) : test::scalar_i64(0)};
    });
  });
  try {
    ints(Dataset::zip({Dataset::range(3), odd}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("dataset 1 element 1"), std::string::npos) << e.what();
  }
}

TEST(DataPipeline, Concatenate) {
  const Dataset ds = Dataset::range(3).concatenate(Dataset::range(10, 12));
  EXPECT_EQ(ints(ds), (std::vector<std::int64_t>{0, 1, 2, 10, 11}));
  EXPECT_EQ(ds.cardinality(), 5);
  EXPECT_EQ(Dataset::range(3).repeat().concatenate(Dataset::range(1)).cardinality(), data::kInfiniteCardinality);
  const Dataset floats = Dataset::from_tensor_slices(Tensor::from_vector<float>({1, 2}, {2}));
  try {
    ints(Dataset::range(2).concatenate(floats));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("element 0 of the second"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
}

TEST(DataPipeline, FilterAndItsErrors) {
  const Dataset even = Dataset::range(10).filter([](const Element& e) { return test::value(e) % 2 == 0; });
  EXPECT_EQ(ints(even), (std::vector<std::int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(even.cardinality(), data::kUnknownCardinality);
  EXPECT_EQ(Dataset::range(3).repeat().filter([](const Element&) { return true; }).cardinality(),
            data::kInfiniteCardinality);
  const Dataset bad = Dataset::range(10).filter([](const Element& e) {
    if (test::value(e) == 4) throw std::invalid_argument("no fours");
    return true;
  });
  try {
    ints(bad);
    FAIL();
  } catch (const data::FunctionError& e) {
    EXPECT_EQ(e.element_index(), 4);
    EXPECT_EQ(e.original_message(), "no fours");
    EXPECT_THROW(std::rethrow_if_nested(e), std::invalid_argument);
  }
}

TEST(DataPipeline, UnbatchUndoesBatch) {
  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  const Dataset ds = Dataset::zip({Dataset::from_tensor_slices(x), Dataset::range(5)}).batch(2).unbatch();
  EXPECT_EQ(ds.cardinality(), data::kUnknownCardinality);
  EXPECT_EQ(ints(ds, 1), iota_vec(0, 5));
  int i = 0;
  for (auto& e : ds) {
    EXPECT_EQ(e[0].shape(), (Shape{2}));
    EXPECT_EQ(e[0].to_vector<float>(), (std::vector<float>{2.f * i, 2.f * i + 1}));
    ++i;
  }
  const Dataset ragged = Dataset::from_generator([] {
    return data::Generator([done = false]() mutable -> std::optional<Element> {
      if (done) return std::nullopt;
      done = true;
      return Element{Tensor::zeros({2}), Tensor::zeros({3})};
    });
  });
  EXPECT_THROW(ints(ragged.unbatch()), ValueError);
}

TEST(DataPipeline, SkipEnumerate) {
  EXPECT_EQ(ints(Dataset::range(6).skip(4)), (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(Dataset::range(6).skip(4).cardinality(), 2);
  EXPECT_EQ(Dataset::range(6).skip(9).cardinality(), 0);
  EXPECT_EQ(Dataset::range(6).skip(-1).cardinality(), 0);
  EXPECT_TRUE(ints(Dataset::range(6).skip(-1)).empty());
  const Dataset en = Dataset::range(10, 13).enumerate(5);
  EXPECT_EQ(ints(en, 0), (std::vector<std::int64_t>{5, 6, 7}));
  EXPECT_EQ(ints(en, 1), (std::vector<std::int64_t>{10, 11, 12}));
  EXPECT_EQ(en.cardinality(), 3);
  // skip over the row fast path still gathers the right rows
  const Tensor x = Tensor::from_vector<std::int64_t>(iota_vec(0, 10), {10});
  EXPECT_EQ(ints(Dataset::from_tensor_slices(x).skip(7).batch(2)), (std::vector<std::int64_t>{7, 8, 9}));
}

TEST(DataPipeline, ShardPartitionsExactly) {
  for (std::int64_t n : {0, 1, 7, 12, 13}) {
    for (std::int64_t k : {1, 3, 4}) {
      std::multiset<std::int64_t> all;
      std::int64_t total = 0;
      for (std::int64_t s = 0; s < k; ++s) {
        const Dataset shard = Dataset::range(n).shard(k, s);
        const auto v = ints(shard);
        EXPECT_EQ(static_cast<std::int64_t>(v.size()), shard.cardinality()) << n << " " << k << " " << s;
        for (auto x : v) EXPECT_EQ(x % k, s);
        all.insert(v.begin(), v.end());
        total += static_cast<std::int64_t>(v.size());
      }
      EXPECT_EQ(total, n);
      const auto want = iota_vec(0, n);
      EXPECT_EQ(all, std::multiset<std::int64_t>(want.begin(), want.end()));  // disjoint and complete
    }
  }
  // The same on the gather fast path, after a seeded shuffle every shard agrees on.
  const Tensor x = Tensor::from_vector<std::int64_t>(iota_vec(0, 50), {50});
  std::multiset<std::int64_t> all;
  for (int s = 0; s < 3; ++s) {
    const auto v = ints(Dataset::from_tensor_slices(x).shuffle(50, 7).shard(3, s).batch(4));
    all.insert(v.begin(), v.end());
  }
  const auto want = iota_vec(0, 50);
  EXPECT_EQ(all, std::multiset<std::int64_t>(want.begin(), want.end()));
  EXPECT_THROW(Dataset::range(3).shard(2, 2), ValueError);
  EXPECT_THROW(Dataset::range(3).shard(0, 0), ValueError);
}

TEST(DataPipeline, ReshufflePerEpoch) {
  const Tensor x = Tensor::from_vector<std::int64_t>(iota_vec(0, 100), {100});
  const Dataset ds = Dataset::from_tensor_slices(x).shuffle(100, 3).map([](Element e) { return e; }, 2);
  const auto both = ints(ds.repeat(2));
  const std::vector<std::int64_t> a(both.begin(), both.begin() + 100), b(both.begin() + 100, both.end());
  EXPECT_NE(a, b);
  EXPECT_EQ(std::multiset<std::int64_t>(a.begin(), a.end()), std::multiset<std::int64_t>(b.begin(), b.end()));
}

TEST(DataPipeline, BatchRejectsDtypeMismatch) {
  const Dataset mixed = Dataset::range(4).map([](Element e) {
    if (test::value(e) == 2) return Element{Tensor::scalar(2.f)};
    return e;
  });
  try {
    ints(mixed.batch(4));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("element 2"), std::string::npos) << e.what();
  }
}
