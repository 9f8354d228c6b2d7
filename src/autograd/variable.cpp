#include "lockstep/autograd/variable.hpp"

#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {

namespace {
thread_local const std::vector<ComputeContext*>* t_mirror = nullptr;

Tensor clone_in(ComputeContext* ctx, const Tensor& v, bool trainable) {
  ComputeScope scope(*ctx);
  Tensor c = v.clone();
  c.impl()->trainable_variable = trainable;
  return c;
}
}  // namespace

MirrorScope::MirrorScope(std::vector<ComputeContext*> contexts)
    : contexts_(std::move(contexts)), previous_(t_mirror) {
  t_mirror = &contexts_;
}
MirrorScope::~MirrorScope() { t_mirror = previous_; }
const std::vector<ComputeContext*>* MirrorScope::current() { return t_mirror; }

Variable::Variable(Tensor initial_value, std::string name, bool trainable) : impl_(std::make_shared<Impl>()) {
  LOCKSTEP_CHECK(initial_value.defined(), "Variable '", name, "': initial value is undefined");
  Tensor v = initial_value.clone();
  v.impl()->trainable_variable = trainable;
  impl_->copies.push_back(std::move(v));
  impl_->name = std::move(name);
  impl_->trainable = trainable;
  if (t_mirror && t_mirror->size() > 1) mirror(*t_mirror);
}

void Variable::mirror(const std::vector<ComputeContext*>& contexts) {
  LOCKSTEP_CHECK(impl_, "mirror: undefined Variable");
  if (impl_->contexts == contexts) return;
  const Tensor primary = impl_->copies[0];
  std::vector<Tensor> copies;
  for (auto* ctx : contexts) copies.push_back(clone_in(ctx, primary, impl_->trainable));
  if (contexts.empty()) copies.push_back(primary);
  impl_->copies = std::move(copies);
  impl_->contexts = contexts;
}

const Tensor& Variable::value() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined Variable");
  const auto& ctxs = impl_->contexts;
  if (ctxs.size() > 1) {
    const ComputeContext* cur = &current_compute_context();
    for (std::size_t r = 0; r < ctxs.size(); ++r)
      if (ctxs[r] == cur) return impl_->copies[r];
  }
  return impl_->copies[0];
}

const Tensor& Variable::copy(int r) const {
  LOCKSTEP_CHECK(impl_ && r >= 0 && r < static_cast<int>(impl_->copies.size()), "Variable '",
                 impl_ ? impl_->name : std::string(), "': no copy ", r);
  return impl_->copies[static_cast<std::size_t>(r)];
}

const std::string& Variable::name() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined Variable");
  return impl_->name;
}
bool Variable::trainable() const { return impl_ && impl_->trainable; }

void Variable::assign(const Tensor& v) {
  LOCKSTEP_CHECK(v.shape() == shape(), "Variable '", name(), "': cannot assign shape ", v.shape().str(),
                 " to a variable of shape ", shape().str());
  const Tensor src = v.dtype() == value().dtype() ? v : v.to(value().dtype());
  const auto& ctxs = impl_->contexts;
  if (ctxs.size() > 1) {
    const ComputeContext* cur = &current_compute_context();
    for (std::size_t r = 0; r < ctxs.size(); ++r) {
      if (ctxs[r] == cur) {
        impl_->copies[r].copy_from(src);
        return;
      }
    }
    for (auto& c : impl_->copies) c.copy_from(src);
    return;
  }
  impl_->copies[0].copy_from(src);
}

void Variable::assign_add(const Tensor& delta) { assign(add(value(), delta)); }
void Variable::assign_sub(const Tensor& delta) { assign(sub(value(), delta)); }

bool is_trainable_variable_value(const Tensor& t) { return t.defined() && t.impl()->trainable_variable; }

}  // namespace lockstep
