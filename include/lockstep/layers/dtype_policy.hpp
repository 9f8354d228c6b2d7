#pragma once
// Keras' mixed-precision policies (keras.mixed_precision): a layer keeps its variables in
// float32 and computes in the policy's compute dtype, casting its floating inputs and reading
// its variables as that dtype (the casts are recorded, so gradients reach the float32
// variables as float32). Models compute the final softmax and the loss in float32.
//
//   mixed_precision::set_global_policy("mixed_bfloat16");  // layers made from now on
//   auto out = layers::Dense({.units = 10, .activation = "softmax", .dtype = "float32"});
//
// The global policy is read when a layer is constructed (as Keras does), so it is a process-wide
// default like Keras' and is not tied to a strategy.
#include <string>

#include "lockstep/core/dtype.hpp"

namespace lockstep::mixed_precision {

class Policy {
 public:
  /// "float32", "mixed_float16" or "mixed_bfloat16"; anything else is a ValueError listing them.
  explicit Policy(const std::string& name = "float32");
  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_; }
  DType variable_dtype() const { return DType::kF32; }
  bool operator==(const Policy& o) const { return name_ == o.name_; }

 private:
  std::string name_;
  DType compute_;
};

void set_global_policy(const std::string& name);
void set_global_policy(const Policy& policy);
Policy global_policy();

}  // namespace lockstep::mixed_precision
