#pragma once
// A model built on N CPU replicas of a MirroredStrategy, or without a strategy: what tests
// comparing a run on replicas with one on no strategy need, and the weights they compare.
#include <memory>
#include <utility>
#include <vector>

#include "lockstep/distribute/strategy.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::test {

template <typename M>
struct ModelOnCpus {
  std::unique_ptr<distribute::MirroredStrategy> strategy;  // null: no strategy
  std::unique_ptr<M> model;                                // (declared after: destroyed first)
};

/// `make()` (returning a std::unique_ptr to a model) called inside the scope of a
/// MirroredStrategy of `replicas` CPU devices, or under no strategy where `replicas` is 0.
template <typename Make>
auto model_on_cpus(int replicas, Make&& make) {
  using M = typename decltype(make())::element_type;
  ModelOnCpus<M> out;
  if (replicas > 0) {
    out.strategy =
        std::make_unique<distribute::MirroredStrategy>(distribute::MirroredOptions{.num_cpu_devices = replicas});
    const auto scope = out.strategy->scope();
    out.model = std::forward<Make>(make)();
  } else {
    out.model = std::forward<Make>(make)();
  }
  return out;
}

/// Every variable's values, in the model's order: two runs' weights compared bit for bit.
inline std::vector<std::vector<float>> weights_of(const Model& model) {
  std::vector<std::vector<float>> out;
  for (const auto& v : model.variables()) out.push_back(v.value().to_vector<float>());
  return out;
}

}  // namespace lockstep::test
