#include "lockstep/io/histogram.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace lockstep::io {

const std::vector<double>& default_histogram_bucket_limits() {
  static const std::vector<double> kLimits = [] {
    std::vector<double> pos;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
    pos.push_back(DBL_MAX);
    std::vector<double> out;
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) out.push_back(-*it);
    out.push_back(0.0);
    out.insert(out.end(), pos.begin(), pos.end());
    return out;
  }();
  return kLimits;
}

HistogramData make_histogram(const float* values, std::size_t n) {
  const auto& limits = default_histogram_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  HistogramData h;
  h.min = DBL_MAX;
  h.max = -DBL_MAX;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (std::isnan(v)) continue;
    const auto b = static_cast<std::size_t>(std::upper_bound(limits.begin(), limits.end(), v) - limits.begin());
    counts[std::min(b, limits.size() - 1)] += 1;
    h.min = std::min(h.min, v);
    h.max = std::max(h.max, v);
    h.num += 1;
    h.sum += v;
    h.sum_squares += v * v;
  }
  // TF's EncodeToProto: every non-empty bucket is kept; a run of empty buckets becomes one
  // empty bucket ending where the run ends.
  for (std::size_t i = 0; i < counts.size();) {
    double end = limits[i];
    const double count = counts[i];
    std::size_t j = i + 1;
    while (count == 0.0 && j < counts.size() && counts[j] == 0.0) end = limits[j++];
    h.bucket_limit.push_back(end);
    h.bucket.push_back(count);
    i = j;
  }
  if (h.num == 0) h.min = h.max = 0;
  return h;
}

}  // namespace lockstep::io
