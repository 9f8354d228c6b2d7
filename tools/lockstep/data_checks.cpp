#include "data_checks.hpp"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "lockstep/core/error.hpp"
#include "lockstep/core/half.hpp"

namespace lockstep::cli {

namespace {
// The index and value of the first non-finite element (index -1: none).
template <typename T>
std::pair<std::int64_t, float> first_non_finite(const Tensor& t) {
  const T* p = t.data<T>();
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i) {
    float v;
    if constexpr (std::is_same_v<T, float>) v = p[i];
    else v = to_float(p[i]);
    if (!std::isfinite(v)) return {i, v};
  }
  return {-1, 0.f};
}

void check_array(const Tensor& t, const std::string& source, const char* name) {
  if (!t.defined() || !is_floating(t.dtype())) return;
  const auto [at, v] = t.dtype() == DType::kF32   ? first_non_finite<float>(t)
                          : t.dtype() == DType::kF16 ? first_non_finite<Float16>(t)
                                                     : first_non_finite<BFloat16>(t);
  if (at < 0) return;
  throw ValueError(detail::concat(source, ": ", name, " holds a non-finite value (", v, ") at element ", at,
                                  " (flat index); lockstep trains and evaluates on finite values only"));
}
}  // namespace

void check_finite_data(const datasets::TrainTest& data, const std::string& source) {
  check_array(data.train.x, source, "x_train");
  check_array(data.train.y, source, "y_train");
  check_array(data.test.x, source, "x_test");
  check_array(data.test.y, source, "y_test");
}

}  // namespace lockstep::cli
