#pragma once
// The backend-parity harness (ggml's test-backend-ops is the model): one table row per op and
// input case. Every row runs on every built backend that has a device, for every dtype. Inputs
// are generated on the host (floats as float32, integers as int64), cast to the row's dtype on
// the device, the op runs, and its outputs, cast back, are compared with a naive reference
// written here in double precision and evaluated on the SAME dtype-rounded inputs. Where the
// backend lacks a kernel, the row expects a ValueError naming op, dtype and device.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::parity {

// ---- tolerances: the one place they are stated ----
struct Tolerance {
  double rel = 0, abs = 0;
};
/// A floating result passes when |got - ref| <= rel * (|ref| + mag) + kAccumulationRel * acc + abs,
/// with rel/abs those of the OUTPUT's dtype: one rounding to that dtype, with margin (float32:
/// also libm's few-ulp error). `mag` is extra magnitude the rounding is relative to (a 16-bit
/// result rounded twice, a cancellation), `acc` the size of the float32 arithmetic inside (the
/// sum of |terms| of a sum or dot product: every dtype computes in float32). Integer outputs and
/// rows marked kExact (selections, copies, casts) must match exactly; NaN matches NaN.
inline Tolerance tolerance(DType output) {
  switch (output) {
    case DType::kF32: return {1e-5, 1e-6};
    case DType::kF16: return {1e-3, 1e-6};
    case DType::kBF16: return {8e-3, 1e-6};
    default: return {0, 0};
  }
}
inline constexpr double kAccumulationRel = 1e-6;

inline constexpr DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};
inline constexpr DType kInts[] = {DType::kI32, DType::kI64, DType::kU8};
std::vector<DType> floats();
std::vector<DType> all_dtypes();
std::vector<DType> ints();

// ---- host values ----
/// A tensor's values on the host, as doubles (floats through float32, integers through int64).
struct Host {
  std::vector<double> v;
  Shape shape;
  DType dtype = DType::kF32;
  double operator[](std::int64_t i) const { return v[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const { return static_cast<std::int64_t>(v.size()); }
};
/// A reference output: values, and per element the extra magnitudes of the tolerance above.
struct Expected {
  Shape shape;
  std::vector<double> v, mag, acc;
  explicit Expected(const Shape& s);
  std::int64_t numel() const { return static_cast<std::int64_t>(v.size()); }
  void set(std::int64_t i, double value, double accumulated = 0, double extra_mag = 0);
};

// ---- input generators: one value per element, for the element's dtype ----
using Gen = std::function<double(std::mt19937_64&, DType, std::int64_t index)>;
/// Floats uniform in [lo, hi); integers uniform in [lo, hi] clipped to the dtype.
Gen uniform(double lo, double hi);
/// Like uniform, but |x| >= gap (keeps finite differences and divisions away from 0).
Gen away_from_zero(double lo, double hi, double gap);
/// Storage values: floats in [-4, 4); integers half small, half close to a large base (values
/// that float32 cannot tell apart, for argmax and compares).
Gen wide();
/// A few values only, so that equal elements (ties) are common.
Gen coarse();
/// uniform(lo, hi) with NaN at every `every`-th element.
Gen with_nan(double lo, double hi, int every);
/// NaN, +-inf, +-0 and ordinary values, in turn.
Gen specials();
/// Values for casts: ordinary, halves, out-of-range, NaN, +-inf, +-0 (floats); wide() (ints).
Gen cast_values();
/// Integers in [0, classes).
Gen labels(std::int64_t classes);
/// Row indices into `rows` rows: runs of consecutive rows (gather's fast path), a run to the
/// last row, repeats, then random rows.
Gen row_indices(std::int64_t rows);

struct InputSpec {
  Shape shape;
  Gen gen;
  std::optional<DType> dtype;  // nullopt: the row's dtype
};
/// A kernel an op needs; dtype nullopt: the row's dtype.
struct Need {
  backend::KernelOp op;
  std::optional<DType> dtype;
};

enum class Match { kRounded, kExact };
using RunFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&, DType)>;
using RefFn = std::function<std::vector<Expected>(const std::vector<Host>&, DType)>;
/// Returns the number of mismatches (each reported with ADD_FAILURE).
using CheckFn = std::function<int(const std::vector<Host>& in, const std::vector<Host>& out)>;

struct Row {
  std::string key;      // the coverage line (op and its options), e.g. "matmul_tn"
  std::string variant;  // the input case, e.g. "bcast"
  std::string fn;       // the public op: what an argument error names
  std::string op;       // what a missing-kernel error names (fn unless the op says otherwise)
  std::vector<DType> accepts;  // dtypes the op takes by contract; others must be rejected
  std::vector<DType> only;     // when set, the row runs on these dtypes alone (its inputs need them)
  std::vector<Need> needs;
  std::vector<InputSpec> inputs;
  RunFn run;
  RefFn ref;
  Match match = Match::kRounded;
  CheckFn check;  // instead of ref: a property of the outputs (a random mask)
  std::string name() const { return key + "_" + variant; }
};
Row make_row(std::string key, std::string variant, std::string fn, std::vector<DType> accepts,
             std::vector<Need> needs, std::vector<InputSpec> inputs, RunFn run, RefFn ref,
             Match match = Match::kRounded);

// The table, by family (parity_rows_*_test.cpp).
std::vector<Row> elementwise_rows();
std::vector<Row> linalg_reduce_rows();
std::vector<Row> storage_rows();
std::vector<Row> nn_update_rows();
std::vector<Row> conv_pool_rows();
std::vector<Row> attention_rows();
const std::vector<Row>& all_rows();

// ---- naive reference helpers ----
/// v rounded to the floating dtype d (round to nearest even; overflow to inf), written from
/// the IEEE formats' parameters, not from lockstep's conversions.
double round_to(double v, DType d);
/// numpy's astype: floats to floats rounded (integers to 16-bit floats through float32),
/// floats to ints truncated toward zero and saturated (NaN -> 0), ints to ints wrapped.
double cast_ref(double v, DType from, DType to);
/// An integer result stored in an integer dtype (two's complement wrap-around).
double wrap(double v, DType d);
Shape broadcast(const Shape& a, const Shape& b);
/// Element of `in` that broadcasts to flat index i of `out`.
std::int64_t broadcast_index(const Shape& out, const Shape& in, std::int64_t i);
struct AxisSplit {
  std::int64_t outer = 1, axis = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int axis);
Shape reduced(const Shape& s, std::optional<int> axis, bool keepdims);

// ---- running ----
struct Backend {
  DeviceKind kind;
  std::string name;
  bool available = false;
  std::string why_not;
};
/// The CPU, then CUDA (available when its backend is built with kernels and a GPU is present).
const std::vector<Backend>& backends();
/// The compute context rows run in on that backend (the CPU's has 3 threads, so that inputs
/// past 2 * 32768 elements take the kernels' parallel paths).
ComputeContext& context_of(DeviceKind kind);
bool supported(const Row& row, DeviceKind kind, DType dtype);
std::vector<Tensor> make_inputs(const Row& row, DType dtype);
Host to_host(const Tensor& t);
/// Mismatches of `got` against `want` under the tolerance above (each reported, up to a few).
int compare(const Expected& want, const Host& got, Match match, const std::string& what);

}  // namespace lockstep::parity
