#pragma once
// The weighted gather along a middle axis (backend resample): y[r, o, :] = the sum over the taps
// t of output o of weight[o, t] * x[r, index[o, t], :]. One axis of an image's resize, or both
// over its pixels (layers/image_resize.hpp), in one pass, the work of its taps alone; its
// gradient is the same kernel over the transposed taps (for each input, the outputs that read
// it), no atomics: the same bits on every run and every replica count.
#include <cstdint>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// Taps on the host: output o reads input index[o * taps + t] with weight[o * taps + t] for
/// t < taps; an output with fewer inputs has weight 0 on its last taps (and a valid index).
struct HostTaps {
  std::int64_t taps = 0;
  std::vector<std::int64_t> index;
  std::vector<float> weight;
};

/// The taps of the gradient of `forward` (its outputs read inputs [0, in)): for each input i, the
/// outputs o that read it, in increasing o, each with the weight it reads i with (an input read
/// twice by one output: both weights); padded to the largest count with weight 0 and index 0.
/// An input no output reads has taps of weight 0 alone. ResourceError when the table would not
/// fit in host memory (a hostile size).
HostTaps transposed_taps(const HostTaps& forward, std::int64_t in);

/// A table on a device: index (outputs, taps) int64, weight (outputs, taps) float32.
struct ResampleTaps {
  Tensor index;
  Tensor weight;
};

/// x (rows, in, inner), of a floating dtype, resampled along its middle axis by `taps` (index
/// values in [0, in)): y (rows, outputs, inner), in float32 arithmetic, each output's taps added
/// in order. Recorded: x's gradient is resample_taps(g, transposed), `transposed` holding
/// transposed_taps of `taps` (inputs, taps'), index values in [0, outputs). Both tables on x's
/// device (device_constant keeps them there). ValueError naming the shapes otherwise.
Tensor resample(const Tensor& x, const ResampleTaps& taps, const ResampleTaps& transposed);
/// resample's kernel alone, not recorded (what resample and its gradient run; the parity rows).
Tensor resample_taps(const Tensor& x, const ResampleTaps& taps);

}  // namespace lockstep
