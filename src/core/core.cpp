#include <cctype>
#include <charconv>

#include "lockstep/core/device.hpp"
#include "lockstep/core/dtype.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/core/reduce_op.hpp"
#include "lockstep/core/shape.hpp"

namespace lockstep {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  LOCKSTEP_ASSERT(false);
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
  }
  return "unknown";
}

std::int64_t Shape::operator[](int i) const {
  const int r = static_cast<int>(dims_.size());
  const int j = i < 0 ? i + r : i;
  LOCKSTEP_CHECK(j >= 0 && j < r, "Shape ", str(), ": dimension index ", i, " out of range for rank ", r);
  return dims_[static_cast<std::size_t>(j)];
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  // An overflowed count would allocate a wrapped-around size (--hidden 2^62 once did).
  for (auto d : dims_)
    LOCKSTEP_CHECK(!__builtin_mul_overflow(n, d, &n), "Shape ", str(), ": the number of elements overflows 64 bits");
  return n;
}

Shape Shape::tail() const {
  LOCKSTEP_CHECK(!dims_.empty(), "Shape::tail of a scalar shape");
  return Shape(std::vector<std::int64_t>(dims_.begin() + 1, dims_.end()));
}

std::string Shape::str() const {
  std::string s = "(";
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? std::string("None") : std::to_string(dims_[i]);
  }
  if (dims_.size() == 1) s += ",";
  return s + ")";
}

namespace {
// How users name each device kind: `name` is how str() writes it; parse also takes `alias`.
struct DeviceKindName {
  DeviceKind kind;
  const char* name;
  const char* alias;
};
constexpr DeviceKindName kDeviceKindNames[] = {{DeviceKind::kCpu, "cpu", nullptr}, {DeviceKind::kCuda, "gpu", "cuda"}};
}  // namespace

Device Device::parse(const std::string& s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto colon = lower.find(':');
  const std::string kind = lower.substr(0, colon);
  Device d;
  const DeviceKindName* named = nullptr;
  for (const DeviceKindName& k : kDeviceKindNames)
    if (kind == k.name || (k.alias && kind == k.alias)) named = &k;
  if (!named) throw ValueError("malformed device '" + s + "': expected cpu, cpu:N, gpu:N or cuda:N");
  d.kind = named->kind;
  if (colon != std::string::npos) {
    const std::string idx = lower.substr(colon + 1);
    int v = -1;
    auto [p, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), v);
    if (idx.empty() || ec != std::errc() || p != idx.data() + idx.size() || v < 0) {
      throw ValueError("malformed device '" + s + "': the index after ':' must be a non-negative integer");
    }
    d.index = v;
  }
  return d;
}

std::string Device::str() const {
  for (const DeviceKindName& k : kDeviceKindNames)
    if (k.kind == kind) return std::string(k.name) + ":" + std::to_string(index);
  return "unknown:" + std::to_string(index);
}

}  // namespace lockstep
