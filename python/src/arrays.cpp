#include "arrays.hpp"

#include <cstring>
#include <memory>
#include <vector>

#include "lockstep/core/error.hpp"

namespace lockstep::python {

namespace {
struct DTypeRow {
  DType dtype;
  nb::dlpack::dtype numpy;
};
const DTypeRow kDTypes[] = {
    {DType::kF32, nb::dtype<float>()},         {DType::kI32, nb::dtype<std::int32_t>()},
    {DType::kI64, nb::dtype<std::int64_t>()},  {DType::kU8, nb::dtype<std::uint8_t>()},
    {DType::kF16, {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}},
};

std::string numpy_dtype_name(nb::dlpack::dtype d) {
  const char* kind = d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)  ? "float"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)  ? "int"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) ? "uint"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool) ? "bool"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Complex) ? "complex"
                                                                                          : "other";
  return kind + std::to_string(d.bits);
}
}  // namespace

Tensor tensor_from_array(const HostArray& a, const char* what) {
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < a.ndim(); ++i) dims.push_back(static_cast<std::int64_t>(a.shape(i)));
  for (const auto& row : kDTypes) {
    if (row.numpy != a.dtype()) continue;
    Tensor t = Tensor::empty(Shape(dims), row.dtype);
    if (t.nbytes() > 0) t.copy_from_host(a.data(), t.nbytes());
    return t;
  }
  throw ValueError(std::string(what) + ": arrays of dtype " + numpy_dtype_name(a.dtype()) +
                   " are not supported (float32, float16, int32, int64 or uint8)");
}

NumpyArray array_from_tensor(const Tensor& t) {
  const auto* row = [&]() -> const DTypeRow* {
    for (const auto& r : kDTypes)
      if (r.dtype == t.dtype()) return &r;
    return nullptr;
  }();
  Tensor host = row ? t : t.to(DType::kF32);  // bfloat16: NumPy has no such dtype
  if (!row) row = &kDTypes[0];
  auto bytes = std::make_unique<unsigned char[]>(std::max<std::size_t>(host.nbytes(), 1));
  if (host.nbytes() > 0) host.copy_to_host(bytes.get(), host.nbytes());
  std::vector<std::size_t> shape;
  for (auto d : host.shape().dims()) shape.push_back(static_cast<std::size_t>(d));
  nb::capsule owner(bytes.get(), [](void* p) noexcept { delete[] static_cast<unsigned char*>(p); });
  return NumpyArray(bytes.release(), shape.size(), shape.data(), owner, nullptr, row->numpy);
}

}  // namespace lockstep::python
