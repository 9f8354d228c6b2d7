#include "data/autotune.hpp"

#include <algorithm>

namespace lockstep::data::detail {

HillClimb::Step HillClimb::record(double waited, double busy_seconds, int producers, bool can_grow,
                                  bool must_shrink) {
  ++elements_;
  waited_ += waited;
  const auto now = Clock::now();
  const auto elapsed = now - window_start_;
  // A window spans enough elements to average out jitter, and enough time to be measurable.
  if (elapsed < kMaxWindow && (elapsed < kMinWindow || elements_ < std::max(8, 4 * level_))) return Step::kNone;
  const double seconds = std::chrono::duration<double>(elapsed).count();
  const double rate = static_cast<double>(elements_) / seconds;
  const double wait_fraction = waited_ / seconds;
  const double busy_fraction = (busy_seconds - busy_at_start_) / (seconds * std::max(1, producers));
  window_start_ = now;
  elements_ = 0;
  waited_ = 0;
  busy_at_start_ = busy_seconds;
  if (cooldown_ > 0) --cooldown_;

  if (must_shrink && level_ > 1) {
    probing_ = false;
    return Step::kShrink;
  }
  if (probing_) {
    probing_ = false;
    if (rate < rate_before_probe_ * 1.05) {
      cooldown_ = 16;
      return Step::kShrink;
    }
    return Step::kNone;
  }
  if (wait_fraction > 0.05 && can_grow && cooldown_ == 0) {
    probing_ = true;
    rate_before_probe_ = rate;
    return Step::kGrow;
  }
  if (wait_fraction < 0.01 && busy_fraction < 0.5 && level_ > 1) return Step::kShrink;
  return Step::kNone;
}

}  // namespace lockstep::data::detail
