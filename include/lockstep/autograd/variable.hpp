#pragma once
// A Variable: a named, mutable tensor that GradientTape watches automatically when trainable
// (as tf.Variable). Copies share the same variable; assign* update it in place, so tensors
// previously read from it see the new values.
#include <memory>
#include <string>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

class Variable {
 public:
  Variable() = default;
  Variable(Tensor initial_value, std::string name = "", bool trainable = true);

  bool defined() const { return impl_ != nullptr; }
  /// The current value (aliases the variable's storage).
  const Tensor& value() const;
  const std::string& name() const;
  bool trainable() const;
  const Shape& shape() const { return value().shape(); }

  void assign(const Tensor& v);
  void assign_add(const Tensor& delta);
  void assign_sub(const Tensor& delta);

  bool is_same(const Variable& o) const { return impl_ == o.impl_; }

 private:
  struct Impl {
    Tensor value;
    std::string name;
    bool trainable = true;
  };
  std::shared_ptr<Impl> impl_;
};

/// True when this tensor is the value of a trainable Variable (the tape watches it by itself).
bool is_trainable_variable_value(const Tensor& t);

}  // namespace lockstep
