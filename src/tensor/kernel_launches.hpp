#pragma once
// The tensor layer's side of lockstep/tensor/kernel_launches.hpp: where a launch is noted.
#include <cstdint>
#include <vector>

#include "backend/kernels.hpp"
#include "lockstep/core/device.hpp"

namespace lockstep::detail {

/// Notes that kernel `op` runs on `device`.
void note_kernel_launch(const Device& device, backend::KernelOp op);

/// While alive, the launches this thread notes are also added to `tally` (one count per KernelOp):
/// a captured step's kernels, which each replay counts again (note_replayed_launches).
class LaunchTally {
 public:
  explicit LaunchTally(std::vector<std::uint32_t>& tally);
  ~LaunchTally();
  LaunchTally(const LaunchTally&) = delete;
  LaunchTally& operator=(const LaunchTally&) = delete;

 private:
  std::vector<std::uint32_t>* previous_;
};

/// Counts on `device` the launches a tally holds (a replay of what it recorded).
void note_replayed_launches(const Device& device, const std::vector<std::uint32_t>& tally);

/// Notes that a step graph was captured on `device` (step_captures).
void note_step_capture(const Device& device);

}  // namespace lockstep::detail
