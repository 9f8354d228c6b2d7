#include "lockstep/layers/dtype_policy.hpp"

#include <mutex>

#include "lockstep/core/error.hpp"

namespace lockstep::mixed_precision {

namespace {
std::mutex g_mu;
Policy& global() {
  static Policy p("float32");
  return p;
}
}  // namespace

Policy::Policy(const std::string& name) : name_(name) {
  if (name == "float32") {
    compute_ = DType::kF32;
  } else if (name == "mixed_float16") {
    compute_ = DType::kF16;
  } else if (name == "mixed_bfloat16") {
    compute_ = DType::kBF16;
  } else {
    throw ValueError("unknown dtype policy '" + name + "': expected float32, mixed_float16 or mixed_bfloat16");
  }
}

void set_global_policy(const std::string& name) { set_global_policy(Policy(name)); }

void set_global_policy(const Policy& policy) {
  std::lock_guard<std::mutex> lock(g_mu);
  global() = policy;
}

Policy global_policy() {
  std::lock_guard<std::mutex> lock(g_mu);
  return global();
}

}  // namespace lockstep::mixed_precision
