#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include "lockstep/data/dataset.hpp"

using namespace lockstep;
using lockstep::data::Dataset;
using lockstep::data::DatasetNode;
using lockstep::data::Element;
using lockstep::data::kInfiniteCardinality;
using lockstep::data::kUnknownCardinality;

namespace {

Tensor iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return Tensor::from_vector(v, {n});
}

// Every value of component 0 of every element (flattened), in iteration order.
std::vector<std::int64_t> values(const Dataset& ds) {
  std::vector<std::int64_t> out;
  for (auto& e : ds) {
    const auto v = e[0].to_vector<std::int64_t>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<std::int64_t> range(std::int64_t b, std::int64_t e) {
  std::vector<std::int64_t> v;
  for (auto i = b; i < e; ++i) v.push_back(i);
  return v;
}

// A source with no row-selection fast path (as map or a generator will be): it hands out
// elements one by one, so batch must stack them. Element i is {[i, i] as int64 (2,), i as f32 ()}
// except that element `odd_one` (if any) has shape (3,).
class ElementsNode final : public DatasetNode {
 public:
  ElementsNode(std::int64_t n, std::int64_t odd_one = -1) : n_(n), odd_one_(odd_one) {}
  std::unique_ptr<data::Iterator> make_iterator() const override {
    struct It final : data::Iterator {
      std::int64_t i = 0, n, odd;
      std::optional<Element> next() override {
        if (i >= n) return std::nullopt;
        std::vector<std::int64_t> v(i == odd ? 3 : 2, i);
        Element e{Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}), Tensor::scalar(static_cast<float>(i))};
        ++i;
        return e;
      }
    };
    auto it = std::make_unique<It>();
    it->n = n_;
    it->odd = odd_one_;
    return it;
  }
  std::int64_t cardinality() const override { return n_; }
  std::string name() const override { return "elements"; }

 private:
  std::int64_t n_, odd_one_;
};

}  // namespace

TEST(DataDataset, FromTensorSlicesYieldsRowsInOrder) {
  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  const Tensor y = Tensor::from_vector<std::int32_t>({7, 8, 9}, {3});
  const Dataset ds = Dataset::from_tensor_slices(x, y);
  EXPECT_EQ(ds.cardinality(), 3);
  int i = 0;
  for (auto& e : ds) {
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].shape(), (Shape{2}));
    EXPECT_EQ(e[0].to_vector<float>(), (std::vector<float>{2.f * i, 2.f * i + 1}));
    EXPECT_EQ(e[1].shape(), Shape{});
    EXPECT_EQ(e[1].to_vector<std::int32_t>()[0], 7 + i);
    ++i;
  }
  EXPECT_EQ(i, 3);
}

TEST(DataDataset, FromTensorSlicesNamesMismatchedShapes) {
  try {
    Dataset::from_tensor_slices(Tensor::zeros({5, 2}), Tensor::zeros({4}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(5, 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(4,)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Dataset::from_tensor_slices(Tensor::scalar(1)), ValueError);
  EXPECT_THROW(Dataset::from_tensor_slices(std::vector<Tensor>{}), ValueError);
}

TEST(DataDataset, BatchKeepsOrDropsTheRemainder) {
  const Dataset ds = Dataset::from_tensor_slices(iota(10));
  EXPECT_EQ(ds.batch(3).cardinality(), 4);
  EXPECT_EQ(ds.batch(3, /*drop_remainder=*/true).cardinality(), 3);
  std::vector<std::int64_t> sizes;
  for (auto& b : ds.batch(3)) sizes.push_back(b[0].dim(0));
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{3, 3, 3, 1}));
  sizes.clear();
  for (auto& b : ds.batch(3, true)) sizes.push_back(b[0].dim(0));
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{3, 3, 3}));
  EXPECT_EQ(values(ds.batch(3)), range(0, 10));
  EXPECT_EQ(values(ds.batch(5, true)), range(0, 10));
  EXPECT_THROW(ds.batch(0), ValueError);
}

TEST(DataDataset, BatchStacksComponentsWithTheirShapes) {
  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  auto it = Dataset::from_tensor_slices(x, iota(4)).batch(3).make_iterator();
  auto b = it->next();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ((*b)[1].shape(), (Shape{3}));
  EXPECT_EQ((*b)[0].to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  b = it->next();
  EXPECT_EQ((*b)[0].shape(), (Shape{1, 2}));
  EXPECT_FALSE(it->next());
  EXPECT_FALSE(it->next());  // stays exhausted
}

TEST(DataDataset, BatchStacksElementsWithoutTheFastPath) {
  const Dataset ds(std::make_shared<ElementsNode>(5));
  std::vector<Shape> shapes;
  std::vector<float> floats;
  for (auto& b : ds.batch(2)) {
    shapes.push_back(b[0].shape());
    const auto f = b[1].to_vector<float>();
    floats.insert(floats.end(), f.begin(), f.end());
  }
  EXPECT_EQ(shapes, (std::vector<Shape>{{2, 2}, {2, 2}, {1, 2}}));
  EXPECT_EQ(floats, (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(ds.batch(2)), (std::vector<std::int64_t>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(values(ds.shuffle(2).repeat(2).batch(4)).size(), 20u);  // element path of shuffle and repeat
}

TEST(DataDataset, BatchNamesTheMismatchedElement) {
  const Dataset ds(std::make_shared<ElementsNode>(6, /*odd_one=*/4));
  auto it = ds.batch(3).make_iterator();
  EXPECT_TRUE(it->next());
  try {
    it->next();
    FAIL();
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("element 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(3,)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(2,)"), std::string::npos) << msg;
  }
}

TEST(DataDataset, RepeatAndTakeCount) {
  const Dataset ds = Dataset::from_tensor_slices(iota(4));
  EXPECT_EQ(ds.repeat(3).cardinality(), 12);
  auto expected = range(0, 4);
  expected.insert(expected.end(), expected.begin(), expected.end());
  EXPECT_EQ(values(ds.repeat(2)), expected);
  EXPECT_EQ(values(ds.repeat(0)).size(), 0u);
  EXPECT_EQ(ds.repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(ds.repeat().take(10).cardinality(), 10);
  EXPECT_EQ(values(ds.repeat().take(10)).size(), 10u);
  EXPECT_EQ(values(ds.take(2)), range(0, 2));
  EXPECT_EQ(values(ds.take(0)).size(), 0u);
  EXPECT_EQ(values(ds.take(-1)), range(0, 4));
  EXPECT_EQ(ds.take(100).cardinality(), 4);
  EXPECT_EQ(ds.repeat().batch(3).take(5).cardinality(), 5);
  EXPECT_EQ(values(ds.repeat().batch(3).take(5)).size(), 15u);
  // An empty dataset repeated forever is empty, not a hang.
  const Dataset empty = ds.take(0).repeat();
  EXPECT_EQ(empty.cardinality(), 0);
  EXPECT_EQ(values(empty).size(), 0u);
  EXPECT_EQ(values(Dataset(std::make_shared<ElementsNode>(0)).repeat()).size(), 0u);
  EXPECT_THROW(ds.repeat(-2), ValueError);
  EXPECT_THROW(ds.take(-5), ValueError);
}

TEST(DataDataset, UnknownCardinalityPropagates) {
  struct Unknown final : DatasetNode {
    std::unique_ptr<data::Iterator> make_iterator() const override { return ElementsNode(3).make_iterator(); }
    std::int64_t cardinality() const override { return kUnknownCardinality; }
    std::string name() const override { return "unknown"; }
  };
  const Dataset ds(std::make_shared<Unknown>());
  EXPECT_EQ(ds.batch(2).cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.take(2).cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.repeat(2).cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.repeat().cardinality(), kInfiniteCardinality);
}

TEST(DataDataset, ShuffleIsAPermutationThatChangesEachEpoch) {
  const Dataset ds = Dataset::from_tensor_slices(iota(100)).shuffle(100, /*seed=*/42);
  const auto epoch1 = values(ds), epoch2 = values(ds);
  auto sorted = epoch1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, range(0, 100));
  EXPECT_NE(epoch1, range(0, 100));
  EXPECT_NE(epoch1, epoch2);
  // Under repeat, each pass is a new permutation too.
  const auto two = values(Dataset::from_tensor_slices(iota(100)).shuffle(100, 42).repeat(2));
  ASSERT_EQ(two.size(), 200u);
  EXPECT_NE(std::vector<std::int64_t>(two.begin(), two.begin() + 100), std::vector<std::int64_t>(two.begin() + 100, two.end()));
}

TEST(DataDataset, ShuffleIsDeterministicForASeed) {
  const auto make = [](std::uint64_t seed, bool reshuffle) {
    return Dataset::from_tensor_slices(iota(50)).shuffle(20, seed, reshuffle);
  };
  const Dataset a = make(7, true), b = make(7, true);
  EXPECT_EQ(values(a), values(b));  // first epochs agree
  EXPECT_EQ(values(a), values(b));  // and second epochs
  EXPECT_NE(values(make(7, true)), values(make(8, true)));
  const Dataset fixed = make(7, false);
  EXPECT_EQ(values(fixed), values(fixed));
  // Batching gathers rows on the index path; unbatched iteration moves elements. Same order.
  const Dataset c = make(3, false);
  EXPECT_EQ(values(c), values(c.batch(7)));
}

TEST(DataDataset, ShuffleBufferBoundsHowFarElementsMove) {
  EXPECT_EQ(values(Dataset::from_tensor_slices(iota(30)).shuffle(1)), range(0, 30));
  const auto v = values(Dataset::from_tensor_slices(iota(1000)).shuffle(10, 5));
  for (std::size_t pos = 0; pos < v.size(); ++pos) {
    ASSERT_LE(v[pos], static_cast<std::int64_t>(pos) + 9) << "element came out before it entered the buffer";
  }
  EXPECT_THROW(Dataset::from_tensor_slices(iota(3)).shuffle(0), ValueError);
}

TEST(DataDataset, IteratorsAndCopiesAreIndependent) {
  const Dataset ds = Dataset::from_tensor_slices(iota(5)).batch(2);
  const Dataset copy = ds;  // shares the node graph
  auto a = ds.make_iterator(), b = copy.make_iterator();
  std::vector<std::int64_t> first_a, first_b;
  for (int step = 0; step < 3; ++step) {
    first_a.push_back(a->next()->at(0).to_vector<std::int64_t>()[0]);
    first_b.push_back(b->next()->at(0).to_vector<std::int64_t>()[0]);
  }
  EXPECT_EQ(first_a, (std::vector<std::int64_t>{0, 2, 4}));
  EXPECT_EQ(first_b, first_a);
  EXPECT_FALSE(a->next());
  // An iterator keeps what it needs alive: the Dataset it came from may be gone.
  auto orphan = Dataset::from_tensor_slices(iota(5)).shuffle(5).repeat(2).batch(4).make_iterator();
  std::int64_t rows = 0;
  while (auto b = orphan->next()) rows += b->at(0).dim(0);
  EXPECT_EQ(rows, 10);
  // Transformations leave the original as it was.
  EXPECT_EQ(ds.take(1).cardinality(), 1);
  EXPECT_EQ(ds.cardinality(), 3);
}

TEST(DataDataset, ShuffledBatchesKeepRowsTogether) {
  constexpr std::int64_t n = 3000, row = 784;
  Tensor x = Tensor::empty({n, 28, 28}, DType::kU8);
  std::uint8_t* p = x.data<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i) std::fill(p + i * row, p + (i + 1) * row, static_cast<std::uint8_t>(i % 251));
  const Dataset ds = Dataset::from_tensor_slices(x, iota(n)).shuffle(n, 1).batch(64);
  std::vector<bool> seen(n);
  for (auto& b : ds) {
    EXPECT_EQ(b[0].shape().tail(), (Shape{28, 28}));
    const std::uint8_t* xb = b[0].data<std::uint8_t>();
    const auto yb = b[1].to_vector<std::int64_t>();
    for (std::size_t r = 0; r < yb.size(); ++r) {
      ASSERT_FALSE(seen[yb[r]]);
      seen[yb[r]] = true;
      for (std::int64_t k = 0; k < row; k += 97) ASSERT_EQ(xb[r * row + k], yb[r] % 251);
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool s) { return s; }));
}

// Not a benchmark: a guard that batching MNIST costs microseconds a batch, not milliseconds.
TEST(DataDataset, BatchingMnistSizedDataIsFast) {
  constexpr std::int64_t n = 60000;
  const Tensor x = Tensor::zeros({n, 28, 28}, DType::kU8);
  const Tensor y = Tensor::zeros({n}, DType::kU8);
  const Dataset ds = Dataset::from_tensor_slices(x, y).shuffle(n).batch(64);
  const auto start = std::chrono::steady_clock::now();
  std::int64_t batches = 0;
  for (auto& b : ds) batches += b[0].dim(0) > 0;
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(batches, 938);
  RecordProperty("us_per_batch", std::to_string(us / static_cast<double>(batches)));
  std::printf("shuffled MNIST batches of 64: %.1f us per batch (%lld batches, shuffle fill included)\n",
              us / static_cast<double>(batches), static_cast<long long>(batches));
  EXPECT_LT(us / static_cast<double>(batches), 1000.0);  // generous: a shared, loaded machine
}
