// The parity harness's driver: generators, the reference rounding, backends, the per-row test
// (reference, missing-kernel errors, repeatability, the CPU float32 result on other backends)
// and the coverage summary. The rows are in parity_rows_*_test.cpp.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "backend/devices.hpp"
#include "backend/kernels.hpp"
#include "backend/parity.hpp"

namespace lockstep::parity {

std::vector<DType> floats() { return {std::begin(kFloats), std::end(kFloats)}; }
std::vector<DType> ints() { return {std::begin(kInts), std::end(kInts)}; }
std::vector<DType> all_dtypes() { return {std::begin(kAllDTypes), std::end(kAllDTypes)}; }

Expected::Expected(const Shape& s) : shape(s) {
  const auto n = static_cast<std::size_t>(s.numel());
  v.assign(n, 0.0);
  mag.assign(n, 0.0);
  acc.assign(n, 0.0);
}

void Expected::set(std::int64_t i, double value, double accumulated, double extra_mag) {
  const auto k = static_cast<std::size_t>(i);
  v[k] = value;
  acc[k] = accumulated;
  mag[k] = extra_mag;
}

Row make_row(std::string key, std::string variant, std::string fn, std::vector<DType> accepts,
             std::vector<Need> needs, std::vector<InputSpec> inputs, RunFn run, RefFn ref, Match match) {
  Row r;
  r.key = std::move(key);
  r.variant = std::move(variant);
  r.op = fn;
  r.fn = std::move(fn);
  r.accepts = std::move(accepts);
  r.needs = std::move(needs);
  r.inputs = std::move(inputs);
  r.run = std::move(run);
  r.ref = std::move(ref);
  r.match = match;
  return r;
}

const std::vector<Row>& all_rows() {
  static const std::vector<Row> rows = [] {
    std::vector<Row> all;
    for (auto family : {elementwise_rows, linalg_reduce_rows, storage_rows, nn_update_rows, conv_pool_rows,
                        attention_rows})
      for (Row& r : family()) all.push_back(std::move(r));
    return all;
  }();
  return rows;
}

// ---- generators ----
namespace {
// int64 stays within +-2^53 so that every value is exact in the double the reference uses.
std::pair<std::int64_t, std::int64_t> int_range(DType d) {
  switch (d) {
    case DType::kI32: return {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
    case DType::kU8: return {0, 255};
    default: return {-(std::int64_t{1} << 53), std::int64_t{1} << 53};
  }
}
std::int64_t large_base(DType d) {
  return d == DType::kU8 ? 200 : d == DType::kI32 ? std::int64_t{1} << 30 : std::int64_t{1} << 50;
}
double pick(std::mt19937_64& r, std::initializer_list<double> values) {
  std::uniform_int_distribution<std::size_t> u(0, values.size() - 1);
  return *(values.begin() + u(r));
}
bool coin(std::mt19937_64& r) { return (r() & 1) != 0; }
}  // namespace

Gen uniform(double lo, double hi) {
  return [lo, hi](std::mt19937_64& r, DType d, std::int64_t) -> double {
    if (is_floating(d)) return std::uniform_real_distribution<double>(lo, hi)(r);
    const auto [dlo, dhi] = int_range(d);
    const auto a = std::max(dlo, static_cast<std::int64_t>(std::ceil(lo)));
    const auto b = std::min(dhi, static_cast<std::int64_t>(std::floor(hi)));
    return static_cast<double>(a >= b ? a : std::uniform_int_distribution<std::int64_t>(a, b)(r));
  };
}

Gen away_from_zero(double lo, double hi, double gap) {
  return [lo, hi, gap](std::mt19937_64& r, DType d, std::int64_t i) -> double {
    const double v = uniform(gap, std::max(-lo, hi))(r, d, i);
    return (coin(r) && (is_floating(d) || d != DType::kU8)) ? -v : v;
  };
}

Gen wide() {
  return [](std::mt19937_64& r, DType d, std::int64_t i) -> double {
    if (is_floating(d)) return uniform(-4, 4)(r, d, i);
    if (coin(r)) return uniform(-50, 100)(r, d, i);
    const double v = static_cast<double>(large_base(d) + std::uniform_int_distribution<std::int64_t>(0, 15)(r));
    return (d != DType::kU8 && coin(r)) ? -v : v;
  };
}

Gen coarse() {
  return [](std::mt19937_64& r, DType d, std::int64_t) -> double {
    // 1.5 + 2^-12 is a float32 of its own but rounds to 1.5 in float16 and bfloat16.
    if (is_floating(d)) return pick(r, {-1.5, -0.5, 0.0, -0.0, 0.5, 1.5, 1.5 + std::ldexp(1.0, -12)});
    const double b = static_cast<double>(large_base(d));
    return d == DType::kU8 ? pick(r, {0, 1, 2, b, b + 1}) : pick(r, {-b, -1, 0, 1, 2, b, b + 1});
  };
}

Gen with_nan(double lo, double hi, int every) {
  return [lo, hi, every](std::mt19937_64& r, DType d, std::int64_t i) -> double {
    if (is_floating(d) && i % every == every / 2) return std::numeric_limits<double>::quiet_NaN();
    return uniform(lo, hi)(r, d, i);
  };
}

Gen specials() {
  return [](std::mt19937_64& r, DType d, std::int64_t i) -> double {
    if (!is_floating(d)) return wide()(r, d, i);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    const double v[] = {std::numeric_limits<double>::quiet_NaN(), kInf, -kInf, 0.0, -0.0, 1.5, -2.25, 0.25};
    return v[static_cast<std::size_t>(i) % 8];
  };
}

Gen cast_values() {
  return [](std::mt19937_64& r, DType d, std::int64_t i) -> double {
    if (!is_floating(d)) return wide()(r, d, i);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    const double k = std::floor(std::uniform_real_distribution<double>(0, 300)(r));
    switch (i % 16) {
      case 0: return k + 0.5;      // truncation toward zero
      case 1: return -(k + 0.5);
      case 2: return 1e10;         // saturates every integer dtype but int64
      case 3: return -1e10;
      case 4: return 70000.0;      // float16 overflow
      case 5: return 65519.0;      // float16's largest finite after rounding
      case 6: return 300.0;        // uint8 saturates
      case 7: return -1.0;
      case 8: return std::numeric_limits<double>::quiet_NaN();
      case 9: return kInf;
      case 10: return -kInf;
      case 11: return -0.0;
      case 12: return 1e-6;        // float16 subnormal
      default: return uniform(-300, 300)(r, d, i);
    }
  };
}

Gen labels(std::int64_t classes) {
  return [classes](std::mt19937_64& r, DType, std::int64_t) -> double {
    return static_cast<double>(std::uniform_int_distribution<std::int64_t>(0, classes - 1)(r));
  };
}

Gen row_indices(std::int64_t rows) {
  return [rows](std::mt19937_64& r, DType, std::int64_t i) -> double {
    // A pair then a repeat (2, 3, 3), a run of four, a repeat, a run ending at the last row.
    const std::int64_t prefix[] = {2, 3, 3, 4, 5, 6, 0, 0, rows - 2, rows - 1, 1};
    if (i < 11) return static_cast<double>(std::clamp<std::int64_t>(prefix[i], 0, rows - 1));
    return static_cast<double>(std::uniform_int_distribution<std::int64_t>(0, rows - 1)(r));
  };
}

// ---- reference rounding ----
namespace {
// Round to nearest even onto a binary format with `fraction_bits`, exponents [min_exp, max_exp]
// (subnormals below min_exp), overflowing to inf: the IEEE definition, in double.
double round_binary(double v, int fraction_bits, int min_exp, int max_exp) {
  if (!std::isfinite(v) || v == 0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exp) - fraction_bits);
  const double r = std::nearbyint(v / quantum) * quantum;
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, -fraction_bits), max_exp);
  return std::fabs(r) > largest ? std::copysign(std::numeric_limits<double>::infinity(), v) : r;
}
}  // namespace

double round_to(double v, DType d) {
  switch (d) {
    case DType::kF32: return round_binary(v, 23, -126, 127);
    case DType::kF16: return round_binary(v, 10, -14, 15);
    case DType::kBF16: return round_binary(v, 7, -126, 127);
    default: return v;
  }
}

double wrap(double v, DType d) {
  const auto i = static_cast<std::int64_t>(v);
  switch (d) {
    case DType::kI32: return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(i)));
    case DType::kU8: return static_cast<double>(static_cast<std::uint8_t>(i));
    default: return v;
  }
}

double cast_ref(double v, DType from, DType to) {
  if (is_floating(to)) {
    if (!is_floating(from) && to != DType::kF32) return round_to(round_to(v, DType::kF32), to);
    return round_to(v, to);
  }
  if (!is_floating(from)) return wrap(v, to);
  if (std::isnan(v)) return 0;
  double lo = -9223372036854775808.0, hi = 9223372036854775807.0;  // (2^63 in double)
  if (to == DType::kI32) lo = -2147483648.0, hi = 2147483647.0;
  if (to == DType::kU8) lo = 0, hi = 255;
  return std::clamp(std::trunc(v), lo, hi);
}

Shape broadcast(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i < r - a.rank() ? 1 : a.dims()[i - (r - a.rank())];
    const std::int64_t db = i < r - b.rank() ? 1 : b.dims()[i - (r - b.rank())];
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

std::int64_t broadcast_index(const Shape& out, const Shape& in, std::int64_t i) {
  std::int64_t idx = 0, stride = 1;
  for (std::size_t k = out.rank(); k-- > 0;) {
    const std::int64_t coord = i % out.dims()[k];
    i /= out.dims()[k];
    const std::size_t shift = out.rank() - in.rank();
    if (k < shift) continue;
    const std::int64_t d = in.dims()[k - shift];
    idx += (d == 1 ? 0 : coord) * stride;
    stride *= d;
  }
  return idx;
}

AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit v;
  for (int i = 0; i < static_cast<int>(s.rank()); ++i) {
    const std::int64_t d = s.dims()[static_cast<std::size_t>(i)];
    (i < axis ? v.outer : i == axis ? v.axis : v.inner) *= d;
  }
  return v;
}

Shape reduced(const Shape& s, std::optional<int> axis, bool keepdims) {
  if (!axis) return keepdims ? Shape(std::vector<std::int64_t>(s.rank(), 1)) : Shape{};
  std::vector<std::int64_t> dims = s.dims();
  if (keepdims) dims[static_cast<std::size_t>(*axis)] = 1;
  else dims.erase(dims.begin() + *axis);
  return Shape(std::move(dims));
}

// ---- backends ----
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> b{{DeviceKind::kCpu, "cpu", true, ""}};
    Backend cuda{DeviceKind::kCuda, "cuda", false, ""};
    if (!backend::backend_available(DeviceKind::kCuda)) cuda.why_not = "this build's CUDA backend has no kernels";
    else if (backend::device_kind(DeviceKind::kCuda).count() == 0) cuda.why_not = "no GPU is visible";
    else cuda.available = true;
    b.push_back(cuda);
    return b;
  }();
  return all;
}

ComputeContext& context_of(DeviceKind kind) {
  // Leaked, as lockstep's default context is: joining their pools during static destruction
  // would run the workers' thread-local destructors after statics made later (oneDNN's) are gone.
  static auto* contexts = new std::map<DeviceKind, std::shared_ptr<ComputeContext>>;
  auto& c = (*contexts)[kind];
  if (!c) c = make_compute_context(Device{kind, 0}, kind == DeviceKind::kCpu ? 3 : 1);
  return *c;
}

bool supported(const Row& row, DeviceKind kind, DType dtype) {
  return std::all_of(row.needs.begin(), row.needs.end(),
                     [&](const Need& n) { return backend::supports(kind, n.dtype.value_or(dtype), n.op); });
}

namespace {
Tensor from_host(const Host& h, DType dtype) {
  if (is_floating(h.dtype)) {
    std::vector<float> f(h.v.begin(), h.v.end());
    return Tensor::from_vector(f, h.shape).to(dtype);
  }
  std::vector<std::int64_t> i(h.v.size());
  for (std::size_t k = 0; k < i.size(); ++k) i[k] = static_cast<std::int64_t>(h.v[k]);
  return Tensor::from_vector(i, h.shape).to(dtype);
}
std::uint64_t seed_of(const std::string& s) {  // FNV-1a: the same inputs in every build
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}
}  // namespace

std::vector<Tensor> make_inputs(const Row& row, DType dtype) {
  std::vector<Tensor> out;
  for (std::size_t k = 0; k < row.inputs.size(); ++k) {
    const InputSpec& spec = row.inputs[k];
    const DType d = spec.dtype.value_or(dtype);
    // One seed per row and input: float16 and bfloat16 see the float32 row's values, rounded.
    std::mt19937_64 rng(seed_of(row.name()) + k);
    Host h{{}, spec.shape, is_floating(d) ? DType::kF32 : DType::kI64};
    for (std::int64_t i = 0; i < spec.shape.numel(); ++i) h.v.push_back(spec.gen(rng, d, i));
    out.push_back(from_host(h, d));
  }
  return out;
}

Host to_host(const Tensor& t) {
  Host h{{}, t.shape(), t.dtype()};
  if (is_floating(t.dtype())) {
    for (float f : t.to(DType::kF32).to_vector<float>()) h.v.push_back(f);
  } else {
    for (std::int64_t i : t.to(DType::kI64).to_vector<std::int64_t>()) h.v.push_back(static_cast<double>(i));
  }
  return h;
}

int compare(const Expected& want, const Host& got, Match match, const std::string& what) {
  if (got.shape != want.shape) {
    ADD_FAILURE() << what << ": shape " << got.shape.str() << ", expected " << want.shape.str();
    return 1;
  }
  const bool exact = match == Match::kExact || !is_floating(got.dtype);
  const Tolerance tol = tolerance(got.dtype);
  int bad = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double r = want.v[k], g = got.v[k];
    double limit = 0;
    bool ok;
    if (std::isnan(r) || std::isnan(g)) {
      ok = std::isnan(r) && std::isnan(g);
    } else if (exact || std::isinf(r) || std::isinf(g)) {
      ok = r == g;
    } else {
      limit = tol.rel * (std::fabs(r) + want.mag[k]) + kAccumulationRel * want.acc[k] + tol.abs;
      ok = std::fabs(g - r) <= limit;
    }
    if (!ok && ++bad <= 4) {
      ADD_FAILURE() << what << " (" << dtype_name(got.dtype) << ") element " << i << " of " << want.numel()
                    << ": got " << g << ", expected " << r << (exact ? " exactly" : "") << " (|diff| "
                    << std::fabs(g - r) << ", limit " << limit << ")";
    }
  }
  if (bad > 4) ADD_FAILURE() << what << ": " << bad << " mismatching elements in all";
  return bad;
}

namespace {
// ---- the coverage summary ----
enum class Status { kOk, kUnsupported, kRejected, kFailed };
const char* status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kUnsupported: return "unsup";
    case Status::kRejected: return "reject";
    case Status::kFailed: return "FAIL";
  }
  return "?";
}
struct Coverage {
  std::map<std::string, std::map<std::string, std::array<int, kNumDTypes>>> cells;  // backend -> key -> status+1
  void record(const std::string& backend, const std::string& key, DType d, Status s) {
    auto [it, fresh] = cells[backend].try_emplace(key);
    if (fresh) it->second.fill(0);
    int& cell = it->second[static_cast<std::size_t>(d)];
    if (cell == 0 || s == Status::kFailed) cell = static_cast<int>(s) + 1;
  }
};
Coverage& coverage() {
  static Coverage c;
  return c;
}

class CoverageReport : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [backend, keys] : coverage().cells) {
      std::map<Status, int> totals;
      std::ostringstream os;
      os << "\nbackend parity coverage on " << backend << " (ok: matches the reference; unsup: ValueError "
         << "naming op, dtype, device; reject: the op does not take the dtype)\n";
      char line[160];
      std::snprintf(line, sizeof line, "  %-42s", "op");
      os << line;
      for (DType d : kAllDTypes) os << " " << std::string(8 - std::min<std::size_t>(8, std::strlen(dtype_name(d))), ' ') << dtype_name(d);
      os << "\n";
      std::vector<std::string> order;  // table order
      for (const Row& r : all_rows())
        if (keys.count(r.key) && std::find(order.begin(), order.end(), r.key) == order.end()) order.push_back(r.key);
      for (const std::string& key : order) {
        std::snprintf(line, sizeof line, "  %-42s", key.c_str());
        os << line;
        for (int cell : keys.at(key)) {
          std::snprintf(line, sizeof line, " %8s", cell ? status_name(static_cast<Status>(cell - 1)) : "-");
          os << line;
          if (cell) ++totals[static_cast<Status>(cell - 1)];
        }
        os << "\n";
      }
      os << "  " << order.size() << " ops; cells:";
      for (const auto& [s, n] : totals) os << " " << n << " " << status_name(s);
      std::printf("%s\n", os.str().c_str());
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kReport = ::testing::AddGlobalTestEnvironment(new CoverageReport);

bool names(const std::string& msg, const std::string& word) {
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t p = msg.find(word); p != std::string::npos; p = msg.find(word, p + 1)) {
    const bool starts = p == 0 || !is_word(msg[p - 1]);
    const bool ends = p + word.size() == msg.size() || !is_word(msg[p + word.size()]);
    if (starts && ends) return true;
  }
  return false;
}

// A dtype the op does not take (device == null) or a kernel the backend lacks: a ValueError
// naming the op, the dtype (and the device), never a crash or a result.
bool expect_value_error(const Row& row, const std::vector<Tensor>& in, DType dt, const Device* device) {
  const std::string& op = device ? row.op : row.fn;
  const char* why = device ? "a missing kernel" : "a dtype the op does not take";
  try {
    (void)row.run(in, dt);
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    const bool ok = names(msg, op) && names(msg, dtype_name(dt)) && (!device || names(msg, device->str()));
    EXPECT_TRUE(ok) << "the ValueError for " << why << " should name '" << op << "', '" << dtype_name(dt) << "'"
                    << (device ? " and '" + device->str() + "'" : "") << "; it says: " << msg;
    return ok;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ValueError for " << why << ", got another exception: " << e.what();
    return false;
  }
  ADD_FAILURE() << "expected a ValueError for " << why << ", but the op returned a result";
  return false;
}

Status run_case(const Row& row, const Backend& be, DType dt) {
  ComputeContext& ctx = context_of(be.kind);
  ComputeScope scope(ctx);
  const Device device = context_device(ctx);
  const std::vector<Tensor> in = make_inputs(row, dt);
  const bool accepted = std::find(row.accepts.begin(), row.accepts.end(), dt) != row.accepts.end();
  if (!accepted || !supported(row, be.kind, dt)) {
    const bool ok = expect_value_error(row, in, dt, accepted ? &device : nullptr);
    return !ok ? Status::kFailed : accepted ? Status::kUnsupported : Status::kRejected;
  }
  std::vector<Host> hin;
  for (const Tensor& t : in) hin.push_back(to_host(t));
  std::vector<Tensor> out, again;
  try {
    out = row.run(in, dt);
    again = row.run(in, dt);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the op threw: " << e.what();
    return Status::kFailed;
  }
  std::vector<Host> hout;
  for (const Tensor& t : out) hout.push_back(to_host(t));
  int bad = 0;
  std::vector<Expected> want;
  if (row.check) {
    bad += row.check(hin, hout);
  } else {
    want = row.ref(hin, dt);
    if (want.size() != hout.size()) {
      ADD_FAILURE() << hout.size() << " outputs, the reference has " << want.size();
      return Status::kFailed;
    }
    for (std::size_t i = 0; i < want.size(); ++i)
      bad += compare(want[i], hout[i], row.match, "output " + std::to_string(i));
  }
  // Same op, inputs and context: the same bits (for a given pool size, the order is fixed).
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!again[i].bitwise_equal(out[i])) {
      ADD_FAILURE() << "output " << i << " differs bitwise when the op runs again on the same inputs";
      ++bad;
    }
  }
  // Another backend also agrees with the CPU's float32 result on the same (rounded) values.
  if (be.kind != DeviceKind::kCpu && is_floating(dt) && supported(row, DeviceKind::kCpu, DType::kF32)) {
    ComputeScope cpu(context_of(DeviceKind::kCpu));
    std::vector<Tensor> cin;
    for (std::size_t k = 0; k < hin.size(); ++k)
      cin.push_back(from_host(hin[k], row.inputs[k].dtype.value_or(DType::kF32)));
    const std::vector<Tensor> cout = row.run(cin, DType::kF32);
    for (std::size_t i = 0; i < cout.size() && i < hout.size(); ++i) {
      Expected e(cout[i].shape());
      // Rounded to the output's dtype as the op rounds its own result (float16 overflows to inf
      // where float32 still holds the value).
      e.v = to_host(is_floating(hout[i].dtype) ? cout[i].to(hout[i].dtype) : cout[i]).v;
      if (i < want.size()) e.mag = want[i].mag, e.acc = want[i].acc;
      bad += compare(e, hout[i], row.match, "output " + std::to_string(i) + " against the cpu's float32");
    }
  }
  return bad ? Status::kFailed : Status::kOk;
}

struct Case {
  std::size_t backend, row;
};
std::vector<Case> cases() {
  std::vector<Case> c;
  for (std::size_t b = 0; b < backends().size(); ++b)
    if (backends()[b].available)
      for (std::size_t r = 0; r < all_rows().size(); ++r) c.push_back({b, r});
  return c;
}
}  // namespace

class Parity : public ::testing::TestWithParam<Case> {};

TEST_P(Parity, MatchesReferenceOrRaisesValueError) {
  const Backend& be = backends()[GetParam().backend];
  const Row& row = all_rows()[GetParam().row];
  for (DType dt : all_dtypes()) {
    if (!row.only.empty() && std::find(row.only.begin(), row.only.end(), dt) == row.only.end()) continue;
    SCOPED_TRACE(row.name() + " on " + be.name + ", " + dtype_name(dt));
    coverage().record(be.name, row.key, dt, run_case(row, be, dt));
  }
}
INSTANTIATE_TEST_SUITE_P(backend, Parity, ::testing::ValuesIn(cases()), [](const auto& info) {
  return backends()[info.param.backend].name + "_" + all_rows()[info.param.row].name();
});

TEST(ParityBackends, Cuda) {
  const Backend& cuda = backends()[1];
  if (!cuda.available) GTEST_SKIP() << "cuda: " << cuda.why_not << "; its parity rows do not run";
  ComputeScope scope(context_of(DeviceKind::kCuda));
  const Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3});
  EXPECT_EQ(t.device().kind, DeviceKind::kCuda);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(ParityCoverage, EverySupportedKernelIsRunByARow) {
  // A kernel added to a table without a parity row would go untested on every backend.
  for (int k = 0; k < static_cast<int>(backend::KernelOp::kCount); ++k) {
    const auto op = static_cast<backend::KernelOp>(k);
    for (DType d : kAllDTypes) {
      if (!backend::supports(DeviceKind::kCpu, d, op)) continue;
      bool covered = false;
      for (const Row& r : all_rows()) {
        for (DType rd : r.accepts) {
          if (!supported(r, DeviceKind::kCpu, rd)) continue;
          for (const Need& n : r.needs) covered |= n.op == op && n.dtype.value_or(rd) == d;
        }
      }
      EXPECT_TRUE(covered) << "no parity row runs the cpu's " << backend::kernel_op_name(op) << " kernel for "
                           << dtype_name(d);
    }
  }
}

TEST(ParityCoverage, RowNamesAreUnique) {
  std::map<std::string, int> seen;
  for (const Row& r : all_rows()) EXPECT_EQ(++seen[r.name()], 1) << r.name();
  EXPECT_GT(all_rows().size(), 150u);
}

}  // namespace lockstep::parity
