#pragma once
// How far two sets of weights (one vector per tensor) are apart: the largest over the tensors of
// max|a - b| / max|b| (the agreement measure of tests/reference/README.md).
#include <algorithm>
#include <cmath>
#include <vector>

namespace lockstep::test {

inline double max_rel_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < a[t].size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[t][i] - b[t][i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[t][i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace lockstep::test
