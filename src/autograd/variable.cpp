#include "lockstep/autograd/variable.hpp"

#include "lockstep/tensor/ops.hpp"

namespace lockstep {

Variable::Variable(Tensor initial_value, std::string name, bool trainable) : impl_(std::make_shared<Impl>()) {
  LOCKSTEP_CHECK(initial_value.defined(), "Variable '", name, "': initial value is undefined");
  impl_->value = initial_value.clone();
  impl_->value.impl()->trainable_variable = trainable;
  impl_->name = std::move(name);
  impl_->trainable = trainable;
}

const Tensor& Variable::value() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined Variable");
  return impl_->value;
}
const std::string& Variable::name() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined Variable");
  return impl_->name;
}
bool Variable::trainable() const { return impl_ && impl_->trainable; }

void Variable::assign(const Tensor& v) {
  LOCKSTEP_CHECK(v.shape() == shape(), "Variable '", name(), "': cannot assign shape ", v.shape().str(),
                 " to a variable of shape ", shape().str());
  impl_->value.copy_from(v.dtype() == value().dtype() ? v : v.to(value().dtype()));
}

void Variable::assign_add(const Tensor& delta) { assign(add(value(), delta)); }
void Variable::assign_sub(const Tensor& delta) { assign(sub(value(), delta)); }

bool is_trainable_variable_value(const Tensor& t) { return t.defined() && t.impl()->trainable_variable; }

}  // namespace lockstep
