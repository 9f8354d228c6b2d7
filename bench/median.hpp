#pragma once
// The median the benches report (of per-round rates and ratios): the middle value, or the mean of
// the two middle ones; 0 for none.
#include <algorithm>
#include <vector>

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
