// Row batches: batch() over rows of tensors hands its batches over ungathered (for fit's
// replicas to gather their own slices); gathered, they are exactly batch()'s elements.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "backend/context.hpp"
#include "common/error_message.hpp"
#include "data/worker.hpp"
#include "lockstep/data/dataset.hpp"
#include "lockstep/data/input_context.hpp"
#include "lockstep/tensor/ops.hpp"

using namespace lockstep;
using data::Dataset;
using data::Element;

namespace {

Tensor features(std::int64_t n, std::int64_t width = 3) {
  std::vector<float> v(static_cast<std::size_t>(n * width));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  return Tensor::from_vector(v, {n, width});
}
Tensor labels(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i * 7 % 10);
  return Tensor::from_vector(v, {n});
}

// The same pipeline twice (its own shuffle pass counter each time).
Dataset pipeline(std::int64_t n) {
  return Dataset::from_tensor_slices(features(n), labels(n))
      .shuffle(n, 5)
      .batch(4)
      .prefetch(data::kAutotune)
      .repeat(2)
      .take(5);
}

void expect_same(const Element& a, const Element& b, int batch) {
  ASSERT_EQ(a.size(), b.size()) << "batch " << batch;
  for (std::size_t c = 0; c < a.size(); ++c) {
    EXPECT_EQ(a[c].shape(), b[c].shape()) << "batch " << batch << " component " << c;
    EXPECT_EQ(a[c].dtype(), b[c].dtype()) << "batch " << batch << " component " << c;
    EXPECT_TRUE(a[c].bitwise_equal(b[c])) << "batch " << batch << " component " << c;
  }
}

}  // namespace

TEST(RowBatches, GatheredTheyAreBatchesElements) {
  // 10 examples in batches of 4: 4, 4, 2 per pass, reshuffled in the second pass, 5 taken.
  auto elements = pipeline(10).make_iterator();
  auto rows = pipeline(10).make_row_batch_iterator();
  ASSERT_NE(rows, nullptr);
  int count = 0;
  for (;; ++count) {
    auto e = elements->next();
    auto r = rows->next();
    ASSERT_EQ(e.has_value(), r.has_value()) << "batch " << count;
    if (!e) break;
    EXPECT_EQ(r->size(), (*e)[0].dim(0));
    expect_same(r->gather(), *e, count);
    // Every replica's part is that slice of the gathered batch, an empty one included.
    for (int replicas : {2, 3, 5}) {
      const auto slices = data::split_batch_for_replicas(*e, replicas);
      for (int k = 0; k < replicas; ++k) {
        const auto [begin, end] = data::replica_rows(r->size(), replicas, k);
        expect_same(r->gather(begin, end), slices[static_cast<std::size_t>(k)], count);
      }
    }
  }
  EXPECT_EQ(count, 3 + 2);
}

TEST(RowBatches, OtherPipelinesHaveNoneAndLoseNoPass) {
  const Dataset shuffled = Dataset::from_tensor_slices(features(8), labels(8)).shuffle(8, 3);
  const Dataset mapped = shuffled.map([](Element e) { return e; }).batch(4);
  EXPECT_EQ(mapped.make_row_batch_iterator(), nullptr);
  EXPECT_EQ(shuffled.batch(4).repeat().map([](Element e) { return e; }).make_row_batch_iterator(), nullptr);
  EXPECT_EQ(Dataset::from_tensor_slices(features(8)).make_row_batch_iterator(), nullptr) << "not batched";
  // Asking made no pass: the next pass of `shuffled` is still its first.
  const Dataset fresh = Dataset::from_tensor_slices(features(8), labels(8)).shuffle(8, 3);
  expect_same(*shuffled.batch(8).make_iterator()->next(), *fresh.batch(8).make_iterator()->next(), 0);
}

TEST(RowBatches, APartOutsideTheBatchIsAnError) {
  auto rows = Dataset::from_tensor_slices(features(6), labels(6)).batch(4).make_row_batch_iterator();
  ASSERT_NE(rows, nullptr);
  const auto b = rows->next();
  ASSERT_TRUE(b.has_value());
  EXPECT_THROW((void)b->gather(2, 5), ValueError);
  EXPECT_THROW((void)b->gather(3, 2), ValueError);
  EXPECT_EQ(b->gather(4, 4)[0].dim(0), 0);
}

TEST(RowBatches, GatheredAheadTheyAreTheGatheredSlices) {
  // Rows of 12 KB: a gather ahead copies a few rows per chunk, so a slice is many chunks, some
  // copied by the pool's workers between jobs, the rest by take().
  const std::int64_t n = 37, width = 3000;
  const auto make = [&] {
    return Dataset::from_tensor_slices(features(n, width), labels(n)).shuffle(n, 9).batch(16).prefetch(data::kAutotune);
  };
  for (int threads : {1, 3}) {
    backend::ComputeContext ctx(Device{}, threads);
    const backend::ContextGuard guard(ctx);
    auto rows = make().make_row_batch_iterator();
    ASSERT_NE(rows, nullptr);
    int count = 0;
    while (auto r = rows->next()) {
      for (int replicas : {1, 2, 3}) {
        for (int k = 0; k < replicas; ++k) {
          const auto [begin, end] = data::replica_rows(r->size(), replicas, k);
          data::PendingRows ahead = r->gather_ahead(begin, end);
          EXPECT_EQ(ahead.begin(), begin);
          EXPECT_EQ(ahead.end(), end);
          // Ops in between, as a training step's: the workers copy rows after each.
          for (int job = 0; job < 4; ++job) ctx.pool().parallel_for(threads, 1, [](std::int64_t, std::int64_t) {});
          expect_same(ahead.take(), r->gather(begin, end), count);
          EXPECT_THROW((void)ahead.take(), ValueError) << "taken twice";
        }
      }
      ++count;
    }
    EXPECT_EQ(count, 3) << threads << " threads";
  }
}

TEST(RowBatches, ASecondGatherAheadOnABusyPoolAndAnUntakenOneAreSafe) {
  backend::ComputeContext ctx(Device{}, 3);
  const backend::ContextGuard guard(ctx);
  auto rows = Dataset::from_tensor_slices(features(12, 3000), labels(12)).batch(12).make_row_batch_iterator();
  ASSERT_NE(rows, nullptr);
  const auto b = rows->next();
  ASSERT_TRUE(b.has_value());
  {
    data::PendingRows first = b->gather_ahead(0, 6);
    data::PendingRows second = b->gather_ahead(6, 12);  // the pool has one out already: take() gathers
    data::PendingRows dropped = b->gather_ahead(0, 12);
    expect_same(second.take(), b->gather(6, 12), 0);
    expect_same(first.take(), b->gather(0, 6), 0);
  }  // `dropped` is withdrawn here, untaken
  data::PendingRows again = b->gather_ahead(0, 12);
  ctx.pool().parallel_for(3, 1, [](std::int64_t, std::int64_t) {});
  expect_same(again.take(), b->gather(0, 12), 1);
  EXPECT_THROW((void)b->gather_ahead(5, 13), ValueError);
}

// Gathered as stored on the input worker (what a replica on a GPU copies to its device): the
// rows gather_stored gives, in whatever order the futures are read; a range outside the batch
// is gather_stored's error, at get(); a future dropped unread leaves the batch usable.
TEST(RowBatches, GatheredAsStoredOnTheInputWorkerTheyAreTheStoredRows) {
  auto rows = Dataset::from_tensor_slices(features(40, 3000), labels(40)).shuffle(40, 3).batch(16)
                  .make_row_batch_iterator();
  ASSERT_NE(rows, nullptr);
  int count = 0;
  while (auto b = rows->next()) {
    std::vector<std::future<Element>> ahead;
    for (int k = 0; k < 3; ++k) {
      const auto [begin, end] = data::replica_rows(b->size(), 3, k);
      ahead.push_back(data::detail::gather_stored_ahead(*b, begin, end));
    }
    (void)data::detail::gather_stored_ahead(*b, 0, b->size());  // dropped unread
    for (int k = 2; k >= 0; --k) {
      const auto [begin, end] = data::replica_rows(b->size(), 3, k);
      expect_same(ahead[static_cast<std::size_t>(k)].get(), b->gather_stored(begin, end), count);
    }
    auto outside = data::detail::gather_stored_ahead(*b, 5, b->size() + 1);
    EXPECT_VALUE_ERROR(outside.get(), "RowBatch::gather_stored: rows [5, " + std::to_string(b->size() + 1) +
                                          ") are outside the batch of " + std::to_string(b->size()));
    ++count;
  }
  EXPECT_EQ(count, 3);
}

namespace {
Tensor pixels(std::int64_t n, std::int64_t width) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n * width));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>(i * 37 % 256);
  return Tensor::from_vector(v, {n, width});
}
}  // namespace

// cast_and_scale over rows of uint8 pixels: its batches stay row batches (gathered by the
// replicas, cast as they are gathered), and every batch, gathered whole, in replicas' parts or
// ahead on a pool, holds exactly the floats of pixels scaled beforehand (cast, then times the
// scale) -- as does the same cast over a pipeline without the fast path (after a map).
TEST(RowBatches, CastAndScaleGathersBytesAsTheFloatsOfPixelsScaledBeforehand) {
  const std::int64_t n = 37, width = 3000;  // rows of 3000 bytes: a gather ahead is several chunks
  const float s = 1.0f / 255.0f;
  const Tensor bytes = pixels(n, width);
  const Tensor floats = scale(cast(bytes, DType::kF32), s);
  const auto reference = [&] { return Dataset::from_tensor_slices(floats, labels(n)).shuffle(n, 9).batch(16); };
  const auto fused = [&] {
    return Dataset::from_tensor_slices(bytes, labels(n)).cast_and_scale(s).shuffle(n, 9).batch(16).prefetch(2);
  };
  // Without the fast path: the cast is applied element by element.
  const auto mapped = [&] {
    return Dataset::from_tensor_slices(bytes, labels(n)).map([](Element e) { return e; }).cast_and_scale(s).shuffle(n, 9).batch(16);
  };
  ASSERT_EQ(mapped().make_row_batch_iterator(), nullptr);
  for (int threads : {1, 3}) {
    backend::ComputeContext ctx(Device{}, threads);
    const backend::ContextGuard guard(ctx);
    auto expected = reference().make_iterator();
    auto elements = fused().make_iterator();
    auto slow = mapped().make_iterator();
    auto rows = fused().make_row_batch_iterator();
    ASSERT_NE(rows, nullptr) << "cast_and_scale keeps the row-batch fast path";
    int count = 0;
    while (auto want = expected->next()) {
      auto r = rows->next();
      ASSERT_TRUE(r.has_value()) << "batch " << count;
      ASSERT_EQ((*want)[0].dtype(), DType::kF32);
      expect_same(r->gather(), *want, count);
      expect_same(*elements->next(), *want, count);
      expect_same(*slow->next(), *want, count);
      for (int replicas : {2, 3}) {
        for (int k = 0; k < replicas; ++k) {
          const auto [begin, end] = data::replica_rows(r->size(), replicas, k);
          // One thread: as a replica that waits for its peers (gathers the bytes, take() casts);
          // three: the workers cast as they gather.
          data::PendingRows ahead = r->gather_ahead(begin, end, /*caller_waits=*/threads == 1);
          for (int job = 0; job < 4; ++job) ctx.pool().parallel_for(threads, 1, [](std::int64_t, std::int64_t) {});
          expect_same(ahead.take(), data::split_batch_for_replicas(*want, replicas)[static_cast<std::size_t>(k)], count);
        }
      }
      ++count;
    }
    EXPECT_FALSE(rows->next().has_value());
    EXPECT_EQ(count, 3) << threads << " threads";
  }
}

namespace {
void expect_message(const std::function<void()>& f, std::initializer_list<const char*> parts) {
  const std::string m = test::message_of(f);
  for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
}
}  // namespace

TEST(RowBatches, CastAndScaleRejectsFloatsAndMissingComponentsWhereItIsCalled) {
  const Dataset floats = Dataset::from_tensor_slices(features(6), labels(6));
  expect_message([&] { (void)floats.cast_and_scale(0.5f); }, {"component 0", "float32", "integer"});
  expect_message([&] { (void)floats.cast_and_scale(0.5f, 2); },
                                    {"component 2", "out of range", "2 components"});
  // Twice on one component: the second sees floats.
  const Dataset once = Dataset::from_tensor_slices(pixels(6, 4), labels(6)).cast_and_scale(0.5f);
  EXPECT_THROW((void)once.cast_and_scale(0.5f), ValueError);
  // Where the rows' source is unknown (after a map), at the element, naming it.
  const Dataset late = floats.map([](Element e) { return e; }).cast_and_scale(0.5f);
  auto it = late.make_iterator();
  expect_message([&] { (void)it->next(); }, {"element 0", "float32"});
  // Labels (component 1, int64) may be cast too; the fingerprint tells scales apart.
  const Dataset labels_cast = Dataset::from_tensor_slices(features(6), labels(6)).cast_and_scale(0.25f, 1).batch(6);
  const Element b = *labels_cast.make_iterator()->next();
  EXPECT_EQ(b[1].dtype(), DType::kF32);
  EXPECT_EQ(b[1].to_vector<float>()[1], 7 * 0.25f);
  EXPECT_NE(once.node()->name(), Dataset::from_tensor_slices(pixels(6, 4)).cast_and_scale(0.25f).node()->name());
}
