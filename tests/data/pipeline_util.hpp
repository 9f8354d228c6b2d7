#pragma once
// Helpers for the pipeline tests: int64 scalar datasets and their values.
#include <cstdint>
#include <vector>

#include "lockstep/data/dataset.hpp"

namespace lockstep::test {

// Component `c` of every element, each a scalar or flattened, in iteration order.
inline std::vector<std::int64_t> ints(const data::Dataset& ds, std::size_t c = 0) {
  std::vector<std::int64_t> out;
  for (auto& e : ds) {
    const auto v = e[c].to_vector<std::int64_t>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline std::vector<std::int64_t> iota_vec(std::int64_t b, std::int64_t e) {
  std::vector<std::int64_t> v;
  for (auto i = b; i < e; ++i) v.push_back(i);
  return v;
}

inline Tensor scalar_i64(std::int64_t v) {
  Tensor t = Tensor::empty(Shape{}, DType::kI64);
  *t.data<std::int64_t>() = v;
  return t;
}

inline std::int64_t value(const data::Element& e, std::size_t c = 0) { return *e[c].data<std::int64_t>(); }

}  // namespace lockstep::test
