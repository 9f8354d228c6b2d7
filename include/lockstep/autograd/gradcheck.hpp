#pragma once
// Finite-difference gradient check: compares GradientTape's gradient of sum(f(inputs) * w)
// (w a fixed random weighting, so every output element matters) with central differences
// computed in float64 over float32 perturbations.
#include <functional>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

struct GradcheckOptions {
  double eps = 1e-3;
  double atol = 1e-3;
  double rtol = 2e-2;
  std::uint64_t seed = 7;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string message;  // names the input and element of the worst mismatch
};

/// f maps the inputs to one float32 tensor; every input must be float32.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace lockstep
