#include "data_checks.hpp"

#include <algorithm>
#include <cstdint>

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::cli {

namespace {
// Computed through ops (the CLI does not touch tensor memory): x - x is 0 where x is finite and
// NaN where it is not, and NaN is the one value unequal to itself. argmax of that mask is the
// first non-finite element (or 0 when there is none).
void check_array(const Tensor& t, const std::string& source, const char* name) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return;
  const Tensor flat = t.reshape(Shape{t.numel()});
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // bounds the temporaries
  for (std::int64_t begin = 0; begin < flat.numel(); begin += kChunk) {
    const Tensor part = flat.slice(begin, std::min(flat.numel(), begin + kChunk));
    const Tensor diff = sub(part, part);
    const Tensor bad = not_equal(diff, diff);
    const std::int64_t at = argmax(bad, 0).to_vector<std::int64_t>()[0];
    if (bad.slice(at, at + 1).to(DType::kF32).item() == 0.f) continue;
    const float v = part.slice(at, at + 1).to(DType::kF32).item();
    throw ValueError(detail::concat(source, ": ", name, " holds a non-finite value (", v, ") at element ",
                                    begin + at, " (flat index); lockstep trains and evaluates on finite values only"));
  }
}
}  // namespace

void check_finite_data(const datasets::TrainTest& data, const std::string& source) {
  check_array(data.train.x, source, "x_train");
  check_array(data.train.y, source, "y_train");
  check_array(data.test.x, source, "x_test");
  check_array(data.test.y, source, "y_test");
}

}  // namespace lockstep::cli
