#pragma once
// The run-time tuner behind kAutotune: a hill climb on what the consumer measures.
//
// The consumer reports, for every element, how long it waited for it. Every window (a few
// elements and at least kMinWindow of wall time) the tuner compares the fraction of time the
// consumer spent waiting and the fraction the producers spent busy:
//  - the consumer waited (> 5%): add one unit (a thread, a buffer slot) if the budget allows,
//    then keep it only if the next window's throughput is better by 5%, else undo it and leave
//    that level alone for a while (more threads than cores, or a slow input below, do not help);
//  - the consumer never waited (< 1%) and the producers were mostly idle (< 50% busy): give
//    a unit back, to the budget and to whatever else runs;
//  - the ThreadBudget is overdrawn (compute reserved cores since): give a unit back.
#include <chrono>
#include <cstdint>

namespace lockstep::data::detail {

class HillClimb {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kMinWindow = std::chrono::milliseconds(20);
  static constexpr auto kMaxWindow = std::chrono::milliseconds(250);

  enum class Step : std::int8_t { kNone, kGrow, kShrink };

  explicit HillClimb(int level) : level_(level), window_start_(Clock::now()) {}

  /// One element delivered after `waited` seconds. `busy_seconds` is the producers' total busy
  /// time so far (monotonic), `producers` their number. Returns what to do; the caller does it
  /// (or cannot: then it calls undo()) and tells the tuner the level it ended at with level().
  Step record(double waited, double busy_seconds, int producers, bool can_grow, bool must_shrink);
  void set_level(int level) { level_ = level; }
  int level() const { return level_; }

 private:
  int level_;
  Clock::time_point window_start_;
  std::int64_t elements_ = 0;
  double waited_ = 0;
  double busy_at_start_ = 0;
  double rate_before_probe_ = 0;
  bool probing_ = false;
  int cooldown_ = 0;
};

}  // namespace lockstep::data::detail
