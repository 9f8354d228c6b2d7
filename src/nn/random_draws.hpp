#pragma once
// The random draws of layers (Dropout and its recurrent, spatial and alpha forms, RandomFlip,
// the noise layers, RandomContrast, RandomBrightness, RandomTranslation, RandomRotation and
// RandomZoom, RandomCrop) and the recurrent layers' dropout, owned here: which key a call draws
// with, a layer's own seed (its stream and its config entry), and dropout's kept-unit mask (the
// noise, the colour factors and the geometric draws are ops_random.hpp's draws under that key).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "lockstep/layers/layer.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::layers {

/// The key of the draws of the layer whose stream is `stream` in the call `ctx`: the model's
/// seed, the step (on the device where the call has a step block, so a captured step replays
/// with each step's draws) and the global index of the batch's first example, so that replicas
/// draw what one device draws for the same examples. A layer with a seed of its own (`own_seed`,
/// whose stream layer_stream made from it) draws without the model's seed, as Keras' seeded
/// layers draw whatever keras.utils.set_random_seed: two models whose layers share a seed draw
/// the same.
DropoutKey random_key(const CallContext& ctx, std::uint64_t stream,
                      const std::optional<std::int64_t>& own_seed = std::nullopt);

/// The key of a draw the whole global batch shares (RandomCrop's one offset per batch): random_key's
/// with the batch's first example taken as 0 on every replica, so the replicas of a step draw the
/// same value and the result does not depend on how the batch is split.
DropoutKey batch_random_key(const CallContext& ctx, std::uint64_t stream,
                            const std::optional<std::int64_t>& own_seed = std::nullopt);

/// A layer's stream: a seed given to the layer (Keras' seed argument, kept in .keras files) picks
/// its own, mixed with `tag`, the layer class's; without one, the model's per-layer build seed
/// `model_seed` (Dropout's).
std::uint64_t layer_stream(std::uint64_t tag, const std::optional<std::int64_t>& own_seed, std::uint64_t model_seed);

/// A layer's seed as Keras' config holds it: the integer, or null when not given.
nlohmann::json seed_to_json(const std::optional<std::int64_t>& seed);
/// The "seed" of a layer's config (absent or null: none); anything but an integer is Keras'
/// ValueError (its SeedGenerator's message). The one reader and writer of a layer's own seed.
std::optional<std::int64_t> seed_from_config(const nlohmann::json& config);

/// Dropout's kept-unit mask of `rows` examples of `units` units each: 1 / (1 - rate) where a
/// unit is kept, 0 where it is dropped, in `dtype` on the current device, shape (rows, units).
/// Drawn by the dropout kernel from a kept constant of ones, so a step makes no fill and its
/// capture replays the draw. Not recorded (a constant).
Tensor kept_units(std::int64_t rows, std::int64_t units, DType dtype, float rate, const DropoutKey& key);

}  // namespace lockstep::layers
