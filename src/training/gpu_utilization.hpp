#pragma once
// The utilisation of the GPUs fit trains on, for the epoch's logs ("gpu_utilization", percent):
// NVML reports the share of its last sample period (1/6 s to 1 s) in which a kernel ran, so fit
// samples every device at most twice a second (a query costs tens of microseconds) and the epoch
// reports the mean over samples and GPUs. Nothing on CPU devices or where NVML is not there.
#include <chrono>
#include <optional>
#include <vector>

#include "lockstep/tensor/compute_context.hpp"

namespace lockstep::detail {

class GpuUtilization {
 public:
  explicit GpuUtilization(const std::vector<ComputeContext*>& devices) {
    for (auto* d : devices)
      if (context_device(*d).kind == DeviceKind::kCuda) gpus_.push_back(d);
  }
  /// Takes a sample when half a second has passed since the last one.
  void maybe_sample() {
    if (gpus_.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (sampled_once_ && now - last_ < std::chrono::milliseconds(500)) return;
    sampled_once_ = true;
    last_ = now;
    for (auto* d : gpus_) {
      if (const auto u = context_utilization_percent(*d)) {
        sum_ += *u;
        ++count_;
      }
    }
  }
  /// The mean since the last call (sampling once more first), or none without samples.
  std::optional<double> take_mean() {
    sampled_once_ = false;
    maybe_sample();
    if (count_ == 0) return std::nullopt;
    const double mean = sum_ / static_cast<double>(count_);
    sum_ = 0;
    count_ = 0;
    return mean;
  }

 private:
  std::vector<ComputeContext*> gpus_;
  std::chrono::steady_clock::time_point last_{};
  bool sampled_once_ = false;
  double sum_ = 0;
  std::int64_t count_ = 0;
};

}  // namespace lockstep::detail
