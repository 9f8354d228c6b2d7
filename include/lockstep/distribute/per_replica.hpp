#pragma once
#include <cstddef>
#include <type_traits>
#include <vector>

#include "lockstep/core/error.hpp"

namespace lockstep::distribute {

/// One value per replica, as tf.distribute's PerReplica: values()[r] belongs to replica r.
template <typename T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}
  std::size_t size() const { return values_.size(); }
  const T& operator[](std::size_t r) const {
    LOCKSTEP_CHECK(r < values_.size(), "PerReplica: replica ", r, " out of range (", values_.size(), " replicas)");
    return values_[r];
  }
  T& operator[](std::size_t r) {
    LOCKSTEP_CHECK(r < values_.size(), "PerReplica: replica ", r, " out of range (", values_.size(), " replicas)");
    return values_[r];
  }
  const std::vector<T>& values() const { return values_; }
  std::vector<T>& values() { return values_; }

 private:
  std::vector<T> values_;
};

template <typename T>
struct IsPerReplica : std::false_type {};
template <typename T>
struct IsPerReplica<PerReplica<T>> : std::true_type {};
template <typename T>
inline constexpr bool is_per_replica_v = IsPerReplica<std::remove_cvref_t<T>>::value;

/// TF's rule for strategy.run's arguments: replica r gets a PerReplica's component r, and any
/// other value as it is.
template <typename A>
decltype(auto) replica_arg(const A& arg, std::size_t r) {
  if constexpr (is_per_replica_v<A>)
    return arg[r];
  else
    return (arg);
}

}  // namespace lockstep::distribute
