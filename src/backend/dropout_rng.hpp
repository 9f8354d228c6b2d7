#pragma once
// Dropout's counter-based generator: the one rule every backend's dropout and random_fill kernels
// follow, so a mask or a draw is the same on CPU and GPU, however rows are split over threads,
// replicas or devices. A unit (row, column) of a step is dropped when 24 bits of its hash fall
// below rate * 2^24; the hash is the SplitMix64 finaliser cascaded over the key words: (seed,
// stream — the layer —, step), then the global example index of the row, then the column.
// random_fill's draws (uniform, standard_normal) are made from the same hash of a unit.
#include <cmath>
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

/// The unit's hash: what dropped, uniform and standard_normal read.
LOCKSTEP_HOST_DEVICE inline std::uint64_t unit_hash(std::uint64_t row_key, std::int64_t column) {
  return mix(row_key + static_cast<std::uint64_t>(column));
}
LOCKSTEP_HOST_DEVICE inline bool dropped(std::uint64_t row_key, std::int64_t column, std::uint32_t threshold) {
  return static_cast<std::uint32_t>(unit_hash(row_key, column) >> 40) < threshold;
}
/// Uniform in [0, 1): the 24 bits dropped compares with its threshold, times 2^-24 (exact in
/// float32, so bit-identical on every backend); dropped(...) is uniform(...) < rate to 2^-24.
LOCKSTEP_HOST_DEVICE inline float uniform(std::uint64_t row_key, std::int64_t column) {
  return static_cast<float>(static_cast<std::uint32_t>(unit_hash(row_key, column) >> 40)) * 0x1p-24f;
}
/// Standard normal by Box-Muller on the unit's hash, in double, rounded once to float32: u1 from
/// its high 32 bits offset by half (in (0, 1), so its log is finite), u2 from its low 32 bits,
/// sqrt(-2 log u1) cos(2 pi u2). u1, u2 and the square root are exact or correctly rounded
/// everywhere; log and cos are the platform's (glibc's on the CPU, CUDA's on a GPU: each within
/// 2 ulps of double, 2^-51 relative), so a GPU's float32 value is the CPU's except where the
/// double falls within a few double ulps of a float32 rounding boundary (about once in 10^8
/// draws), and there it is one float32 ulp away.
LOCKSTEP_HOST_DEVICE inline float standard_normal(std::uint64_t row_key, std::int64_t column) {
  const std::uint64_t h = unit_hash(row_key, column);
  constexpr double kTwoTo32 = 4294967296.0, kTwoPi = 2.0 * 3.14159265358979323846;
  const double u1 = (static_cast<double>(h >> 32) + 0.5) / kTwoTo32;
  const double u2 = static_cast<double>(h & 0xffffffffULL) / kTwoTo32;
  return static_cast<float>(::sqrt(-2.0 * ::log(u1)) * ::cos(kTwoPi * u2));
}

}  // namespace lockstep::backend::dropout
