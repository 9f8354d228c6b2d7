// The weighted gather along a middle axis (ops_resample.hpp): its checks, the transposed taps of
// its gradient, and the recorded op.
#include "lockstep/tensor/ops_resample.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "lockstep/core/error.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
// transposed_taps' table: count[i] = the taps input i gets (its weights other than 0), width
// their largest count.
HostTaps fill_transposed(const HostTaps& forward, std::int64_t in, std::vector<std::int64_t>& count,
                         std::int64_t width) {
  HostTaps t{.taps = width,
             .index = std::vector<std::int64_t>(static_cast<std::size_t>(in * width), 0),
             .weight = std::vector<float>(static_cast<std::size_t>(in * width), 0.0f)};
  std::fill(count.begin(), count.end(), 0);  // now: the taps filled so far
  for (std::size_t e = 0; e < forward.index.size(); ++e) {
    const float w = forward.weight[e];
    if (w == 0.0f) continue;
    const auto i = static_cast<std::size_t>(forward.index[e]);
    const auto slot = static_cast<std::size_t>(static_cast<std::int64_t>(i) * width + count[i]++);
    t.index[slot] = static_cast<std::int64_t>(e) / forward.taps;
    t.weight[slot] = w;
  }
  return t;
}
}  // namespace

HostTaps transposed_taps(const HostTaps& forward, std::int64_t in) {
  const std::int64_t taps = forward.taps;
  const auto entries = static_cast<std::int64_t>(forward.index.size());
  LOCKSTEP_CHECK(in > 0 && taps > 0 && forward.weight.size() == forward.index.size() && entries % taps == 0,
                 "transposed_taps: needs taps > 0 and index and weight of (outputs, taps) entries for inputs > 0, got ",
                 forward.index.size(), " indices, ", forward.weight.size(), " weights, ", taps, " taps, ", in,
                 " inputs");
  for (std::int64_t e = 0; e < entries; ++e) {
    const std::int64_t i = forward.index[static_cast<std::size_t>(e)];
    LOCKSTEP_CHECK(i >= 0 && i < in, "transposed_taps: index ", i, " at entry ", e, " is outside [0, ", in, ")");
  }
  std::int64_t width = 0;  // known once counted
  const auto fail = [&] {
    return ResourceError(detail::concat("transposed_taps: host memory ran out building the gradient's taps of ",
                                        entries / taps, " outputs over ", in, " inputs (",
                                        width ? detail::concat(width, " taps each") : "counting them", ")"));
  };
  try {
    std::vector<std::int64_t> count(static_cast<std::size_t>(in), 0);
    for (std::int64_t e = 0; e < entries; ++e)
      if (forward.weight[static_cast<std::size_t>(e)] != 0.0f)
        ++count[static_cast<std::size_t>(forward.index[static_cast<std::size_t>(e)])];
    width = std::max<std::int64_t>(1, *std::max_element(count.begin(), count.end()));
    if (width > std::numeric_limits<std::int64_t>::max() / 16 / in) throw fail();
    return fill_transposed(forward, in, count, width);
  } catch (const std::bad_alloc&) {
    throw fail();
  } catch (const std::length_error&) {  // more inputs than a vector may hold
    throw fail();
  }
}

namespace {
constexpr const char* kName = "resample";

// A table's (outputs, taps) after checking it: on `device`, its indices in [0, limit) (x's axis;
// the transposed table's: the outputs).
std::pair<std::int64_t, std::int64_t> check_table(const ResampleTaps& t, const Device& device, std::int64_t limit,
                                                  const char* which) {
  const Tensor& index = t.index;
  const Tensor& weight = t.weight;
  LOCKSTEP_CHECK(index.defined() && weight.defined() && index.rank() == 2 && index.shape() == weight.shape() &&
                     index.dtype() == DType::kI64 && weight.dtype() == DType::kF32,
                 kName, ": ", which, " must be an int64 index and float32 weights of one shape (outputs, taps), got ",
                 index.defined() ? index.shape().str() + " " + dtype_name(index.dtype()) : "undefined", " and ",
                 weight.defined() ? weight.shape().str() + " " + dtype_name(weight.dtype()) : "undefined");
  LOCKSTEP_CHECK(index.device() == device && weight.device() == device, kName, ": ", which, " are on ",
                 index.device().str(), " and ", weight.device().str(), ", x on ", device.str());
  detail::check_labels(kName, index, limit);
  return {index.dim(0), index.dim(1)};
}

// x's gradient: the same kernel over the transposed taps.
class ResampleGradient final : public CustomGradient {
 public:
  explicit ResampleGradient(ResampleTaps transposed) : transposed_(std::move(transposed)) {}
  const char* name() const override { return kName; }
  std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g, const std::array<bool, 3>&) const override {
    return {resample_taps(g.to(r.output.dtype()), transposed_), Tensor(), Tensor()};
  }

 private:
  ResampleTaps transposed_;
};
}  // namespace

Tensor resample_taps(const Tensor& x, const ResampleTaps& taps) {
  detail::check_float(kName, {&x});
  LOCKSTEP_CHECK(x.rank() == 3, kName, ": x must be (rows, in, inner), got ", x.shape().str());
  const auto [outputs, width] = check_table(taps, x.device(), x.dim(1), "the taps");
  const std::int64_t rows = x.dim(0), in = x.dim(1), inner = x.dim(2);
  const auto& k = kern(kName, x, backend::KernelOp::kResample);
  Tensor y = Tensor::empty({rows, outputs, inner}, x.dtype());
  if (y.numel() == 0) return y;
  k.resample(ctx(), x.raw_data(), static_cast<const std::int64_t*>(taps.index.raw_data()),
                static_cast<const float*>(taps.weight.raw_data()), rows, in, outputs, width, inner, y.raw_data());
  return y;
}

Tensor resample(const Tensor& x, const ResampleTaps& taps, const ResampleTaps& transposed) {
  Tensor y = resample_taps(x, taps);
  if (detail::recording({&x})) {
    LOCKSTEP_CHECK(transposed.index.defined() && transposed.index.rank() == 2 && transposed.index.dim(0) == x.dim(1),
                   kName, ": the transposed taps must be (in, taps) = (", x.dim(1), ", taps) for x ", x.shape().str(),
                   ", got ", transposed.index.defined() ? transposed.index.shape().str() : "undefined");
    (void)check_table(transposed, x.device(), y.dim(1), "the transposed taps");
    record_custom({x, Tensor(), Tensor()}, y, std::make_shared<ResampleGradient>(transposed));
  }
  return y;
}

}  // namespace lockstep
