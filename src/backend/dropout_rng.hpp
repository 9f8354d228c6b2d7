#pragma once
// Dropout's counter-based generator: the one rule every backend's dropout kernel follows, so a mask
// is bit-identical on CPU and GPU, however rows are split over threads, replicas or devices.
// A unit (row, column) of a step is dropped when 24 bits of its hash fall below rate * 2^24;
// the hash is the SplitMix64 finaliser cascaded over the key words: (seed, stream — the layer —,
// step), then the global example index of the row, then the column.
#include <cstdint>

#include "lockstep/core/host_device.hpp"

namespace lockstep::backend::dropout {

LOCKSTEP_HOST_DEVICE inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
/// P(drop) = rate to 2^-24.
inline std::uint32_t threshold(float rate) { return static_cast<std::uint32_t>(static_cast<double>(rate) * 16777216.0); }
LOCKSTEP_HOST_DEVICE inline std::uint64_t step_key(std::uint64_t seed, std::uint64_t stream, std::uint64_t step) {
  return mix(mix(mix(seed + 0x9e3779b97f4a7c15ULL) ^ stream) ^ step);
}
/// The step of a call: the count at `step_at` when given (a step block's iterations, in the
/// memory of the device running the kernel: read there, so a captured step replays with the
/// count of each replay), else the host's `step`.
LOCKSTEP_HOST_DEVICE inline std::uint64_t step_key(std::uint64_t seed, std::uint64_t stream, std::uint64_t step,
                                                   const std::int64_t* step_at) {
  return step_key(seed, stream, step_at ? static_cast<std::uint64_t>(*step_at) : step);
}
/// `row` is the example's index in the global batch (first_row + local row).
LOCKSTEP_HOST_DEVICE inline std::uint64_t row_key(std::uint64_t step_key, std::int64_t row) {
  return mix(step_key ^ static_cast<std::uint64_t>(row));
}
LOCKSTEP_HOST_DEVICE inline bool dropped(std::uint64_t row_key, std::int64_t column, std::uint32_t threshold) {
  return static_cast<std::uint32_t>(mix(row_key + static_cast<std::uint64_t>(column)) >> 40) < threshold;
}

}  // namespace lockstep::backend::dropout
