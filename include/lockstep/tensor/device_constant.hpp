#pragma once
// Constant tensors that ops and layers build from host values that depend only on their shape
// parameters (an index of rows to gather, where concatenate or zero padding puts each element,
// the causal mask): built on the host once per device and kept there, so that later calls copy
// nothing from the host. A copy of host memory inside a step keeps jit_compile from capturing it
// ("a replay would copy what that memory holds then") and costs an eager step a transfer; a kept
// constant is only read, by the eager step and by a captured graph's replays alike.
#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// What names a constant: `what`, a string literal naming the op and the constant ("zero_pad2d
/// rows"), and up to six integers, every other value it depends on but its rows (shape
/// parameters, a dtype's number). Made on every call without allocating: a kept constant is
/// found again by it with no string built and no lock taken.
struct ConstantKey {
  static constexpr std::size_t kParams = 6;
  ConstantKey(const char* what, std::initializer_list<std::int64_t> params = {});
  const char* what;
  std::array<std::int64_t, kParams> params{};
  std::size_t count = 0;
  /// "zero_pad2d rows (28, 28, 30, 30, 1, 1)": for messages.
  std::string str() const;
};

/// The builder a caller hands device_constant: a reference to its callable (not copied: it must
/// outlive the call, as a lambda written in the call does).
class ConstantBuilder {
 public:
  template <class F>
    requires(!std::same_as<std::remove_cvref_t<F>, ConstantBuilder>)
  ConstantBuilder(const F& f)  // NOLINT: implicit, so that a lambda is passed as it is
      : f_(&f), call_([](const void* g, std::int64_t n) -> Tensor { return (*static_cast<const F*>(g))(n); }) {}
  Tensor operator()(std::int64_t n) const { return call_(f_, n); }

 private:
  const void* f_;
  Tensor (*call_)(const void*, std::int64_t);
};

/// The first `rows` rows (along axis 0) of the constant named `key` on the current context's
/// device. `build(n)` makes the constant's first n rows in host memory (it runs with the host's
/// context current: Tensor::from_vector and ops make CPU tensors), and row r must not depend on
/// n (an index over a batch: example r's entries), so that a constant built for more rows serves
/// fewer: the short last batch of an epoch reads a view of the first rows. `key` names the
/// values completely but for `rows`: the op and every other parameter, dtype included
/// ({"RepeatVector rows", {4}}). The caller must never write to the result.
///
/// - Built on the first call that asks for more rows than are kept: the eager step that precedes
///   a capture (a step of a new input signature is captured without one: its batch is no larger).
///   The build is not watched by jit_compile's capture check (a replay does not repeat it); on a
///   GPU the host waits once for the copy, so that every stream of the device (logical replicas
///   gpu:0x4 share it) may read it at once (a host read, counted). Integer constants keep their
///   host bytes beside them, so ops check them as indices on the host, not with a device read,
///   and once for a limit, not at every call, on the CPU too (tensor/host_copy.hpp remembers it).
///   Asked for more rows than kept inside a capture, it throws (a capture cannot copy from the
///   host), and the capture is discarded, naming why.
/// - Kept for the process's lifetime, never freed (not even at exit): a captured graph reads it
///   in every replay, so it must outlive every graph; one replaced by a larger build stays too.
///   Thread-safe: replicas share it. Found again without a lock (each thread remembers what it
///   was handed, by key, device and rows).
/// - Bounded: at most device_constant_budget() bytes are kept per device. A constant past it is
///   built by every call and not kept, so a step that uses it copies from the host each time and
///   its capture is refused, naming the copy.
Tensor device_constant(const ConstantKey& key, std::int64_t rows, ConstantBuilder build);

/// The bytes of constants kept per device at most (64 MiB).
std::uint64_t device_constant_budget();
/// Bytes of constants kept on `device` so far.
std::uint64_t device_constant_bytes(const Device& device);

}  // namespace lockstep
