#pragma once
// A small, fully specified random generator for shuffling. std::uniform_int_distribution is
// not: its output differs between standard libraries, and a seed must give the same order
// everywhere (every worker of a job, every platform a test runs on).
#include <cstdint>

namespace lockstep::data::detail {

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// xoshiro256** (Blackman and Vigna), seeded through splitmix64 as its authors advise.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& word : s_) word = splitmix64(seed);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Uniform in [0, bound), bound > 0, without modulo bias: r is rejected below 2^64 mod bound,
  /// which is less than bound, so that division is needed only when r < bound (almost never).
  std::uint64_t below(std::uint64_t bound) {
    for (;;) {
      const std::uint64_t r = next();
      if (r >= bound || r >= (0 - bound) % bound) return r % bound;
    }
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace lockstep::data::detail
