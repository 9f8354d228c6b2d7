#include "nn/random_draws.hpp"

#include <limits>

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/device_constant.hpp"

namespace lockstep::layers {

using nlohmann::json;

std::uint64_t layer_stream(std::uint64_t tag, const std::optional<std::int64_t>& own_seed, std::uint64_t model_seed) {
  return own_seed ? mix_seed(tag, static_cast<std::uint64_t>(*own_seed)) : model_seed;
}

json seed_to_json(const std::optional<std::int64_t>& seed) { return seed ? json(*seed) : json(nullptr); }

std::optional<std::int64_t> seed_from_config(const json& c) {
  const json& seed = c.value("seed", json());
  if (seed.is_null()) return std::nullopt;
  const bool past_int64 =
      seed.is_number_unsigned() && seed.get<std::uint64_t>() > std::uint64_t{std::numeric_limits<std::int64_t>::max()};
  LOCKSTEP_CHECK(seed.is_number_integer() && !past_int64,
                 "Argument `seed` must be an integer. Received: seed=", seed.dump().substr(0, 200));
  return seed.get<std::int64_t>();
}

DropoutKey batch_random_key(const CallContext& ctx, std::uint64_t stream, const std::optional<std::int64_t>& own_seed) {
  DropoutKey key = random_key(ctx, stream, own_seed);
  key.first_example = 0;
  return key;
}

DropoutKey random_key(const CallContext& ctx, std::uint64_t stream, const std::optional<std::int64_t>& own_seed) {
  return DropoutKey{.seed = own_seed ? 0 : ctx.seed,
                    .stream = stream,
                    .step = ctx.step,
                    .first_example = ctx.first_example,
                    .step_block = ctx.step_block};
}

Tensor kept_units(std::int64_t rows, std::int64_t units, DType dtype, float rate, const DropoutKey& key) {
  const Tensor ones = device_constant({"kept_units ones: units, dtype", {units, static_cast<std::int64_t>(dtype)}},
                                      rows, [&](std::int64_t n) { return Tensor::ones(Shape{n, units}).to(dtype); });
  return dropout(ones, rate, key);
}

}  // namespace lockstep::layers
