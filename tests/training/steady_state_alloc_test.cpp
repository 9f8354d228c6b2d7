// The caching allocator's promise: once a training step has run a few times, later steps get
// every tensor buffer from the cache and never reach the system allocator.
#include <gtest/gtest.h>

#include "backend/context.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;

TEST(SteadyState, TrainingStepsMakeNoSystemAllocations) {
  backend::ComputeContext ctx(Device{}, 1);
  backend::ContextGuard guard(ctx);
  std::vector<float> xv(256 * 784);
  std::vector<std::int64_t> yv(256);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 37) % 101) / 101.0f;
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = static_cast<std::int64_t>(i % 10);
  const Tensor x = Tensor::from_vector(xv, {256, 784});
  const Tensor y = Tensor::from_vector(yv, {256});

  Sequential model({layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
  model.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  auto step = [&](int i) {
    const std::int64_t b = (i % 4) * 64;
    model.train_step(x.slice(b, b + 64), y.slice(b, b + 64));
  };
  for (int i = 0; i < 3; ++i) step(i);  // warm-up: slots, cache fill
  const auto before = ctx.allocator().stats();
  for (int i = 3; i < 53; ++i) step(i);
  const auto after = ctx.allocator().stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations)
      << "steady-state steps reached the system allocator";
  EXPECT_GT(after.cache_hits, before.cache_hits + 50 * 10) << "the steps did not allocate through the cache";
}
