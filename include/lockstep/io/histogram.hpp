#pragma once
// TensorBoard histograms with TensorFlow's default bucket edges, so our HistogramProtos bin
// values exactly as tf.summary.histogram's C++ kernel (tensorflow/core/lib/histogram) does.
#include <cstddef>
#include <vector>

namespace lockstep::io {

/// TensorFlow's default bucket limits: -DBL_MAX, -1e20/1.1^k ... -1e-12, 0, 1e-12 ... ~1e20,
/// DBL_MAX (each edge 1.1x the previous, 1551 limits in all). Bucket i counts values v with
/// limit[i-1] <= v < limit[i].
const std::vector<double>& default_histogram_bucket_limits();

/// A histogram in HistogramProto's terms: runs of empty buckets are merged into the next
/// non-empty one's left (as TF's EncodeToProto does), so only a few buckets are stored.
struct HistogramData {
  double min = 0;
  double max = 0;
  double num = 0;
  double sum = 0;
  double sum_squares = 0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

/// Bins `n` values; NaNs are skipped (TensorFlow refuses them; a training log should not).
HistogramData make_histogram(const float* values, std::size_t n);

}  // namespace lockstep::io
