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

Variable::Variable(Tensor initial_value, std::string name, bool trainable)
    : Variable(std::move(initial_value), VariableOptions{.name = std::move(name), .trainable = trainable}) {}

Variable::Variable(Tensor initial_value, const VariableOptions& o) : impl_(std::make_shared<Impl>()) {
  LOCKSTEP_CHECK(initial_value.defined(), "Variable '", o.name, "': initial value is undefined");
  const bool on_read = o.synchronization == VariableSynchronization::kOnRead;
  LOCKSTEP_CHECK(!on_read || !o.trainable, "Variable '", o.name,
                 "': synchronization kOnRead is only for non-trainable variables (as TensorFlow)");
  LOCKSTEP_CHECK(!on_read || o.aggregation != VariableAggregation::kNone, "Variable '", o.name,
                 "': a kOnRead variable needs an aggregation (kSum, kMean or kOnlyFirstReplica) to be read");
  Tensor v = initial_value.clone();
  v.impl()->trainable_variable = o.trainable;
  impl_->copies.push_back(std::move(v));
  impl_->name = o.name;
  impl_->trainable = o.trainable;
  impl_->synchronization = on_read ? VariableSynchronization::kOnRead : VariableSynchronization::kOnWrite;
  impl_->aggregation = o.aggregation;
  // Made where the strategy puts it (TF places variables at creation): a copy per replica, or
  // one replica's device when it is not the host (a lone CPU replica shares the host's memory).
  if (t_mirror && (t_mirror->size() > 1 ||
                   (t_mirror->size() == 1 && context_device(*t_mirror->front()).kind != impl_->copies[0].device().kind)))
    mirror(*t_mirror);
}

void Variable::mirror(const std::vector<ComputeContext*>& contexts) {
  LOCKSTEP_CHECK(impl_, "mirror: undefined Variable");
  if (impl_->contexts == contexts) return;
  const Tensor primary = read_value();
  const bool split_sum = impl_->synchronization == VariableSynchronization::kOnRead &&
                         impl_->aggregation == VariableAggregation::kSum;
  std::vector<Tensor> copies;
  for (auto* ctx : contexts) {
    copies.push_back(clone_in(ctx, primary, impl_->trainable));
    if (split_sum && copies.size() > 1) copies.back().fill_(0.0);
  }
  if (contexts.empty()) copies.push_back(primary);
  impl_->copies = std::move(copies);
  impl_->contexts = contexts;
}

Variable Variable::zeros_like(const Variable& like, std::string name) {
  LOCKSTEP_CHECK(like.impl_, "zeros_like: undefined Variable");
  return zeros_like(like, std::move(name), like.shape());
}

Variable Variable::zeros_like(const Variable& like, std::string name, const Shape& shape) {
  LOCKSTEP_CHECK(like.impl_, "zeros_like: undefined Variable");
  Variable v;
  v.impl_ = std::make_shared<Impl>();
  v.impl_->name = std::move(name);
  v.impl_->trainable = false;
  v.impl_->contexts = like.impl_->contexts;
  if (v.impl_->contexts.empty()) v.impl_->copies.push_back(Tensor::zeros(shape));
  for (auto* ctx : v.impl_->contexts) {
    ComputeScope scope(*ctx);
    v.impl_->copies.push_back(Tensor::zeros(shape));
  }
  return v;
}

void Variable::share_primary() const {
  LOCKSTEP_CHECK(impl_, "share_primary: undefined Variable");
  if (shares_primary()) return;
  for (std::size_t r = 1; r < impl_->copies.size(); ++r) impl_->copies[r] = impl_->copies[0];
}

void Variable::broadcast_primary() const {
  LOCKSTEP_CHECK(impl_, "broadcast_primary: undefined Variable");
  const Tensor& primary = impl_->copies[0];
  for (std::size_t r = 1; r < impl_->copies.size(); ++r) {
    Tensor& c = impl_->copies[r];
    if (c.impl() == primary.impl()) c = clone_in(impl_->contexts[r], primary, impl_->trainable);
    else c.copy_from(primary);
  }
}

int Variable::replica_copy() const {
  const auto& ctxs = impl_->contexts;
  if (ctxs.size() > 1) {
    const ComputeContext* cur = &current_compute_context();
    for (std::size_t r = 0; r < ctxs.size(); ++r)
      if (ctxs[r] == cur) return static_cast<int>(r);
  }
  return -1;
}

const Tensor& Variable::value() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined Variable");
  const int r = replica_copy();
  return impl_->copies[r < 0 ? 0 : static_cast<std::size_t>(r)];
}

Tensor Variable::read_value() const {
  LOCKSTEP_CHECK(impl_, "use of an undefined Variable");
  const int r = replica_copy();
  if (r >= 0) return impl_->copies[static_cast<std::size_t>(r)];
  if (impl_->synchronization != VariableSynchronization::kOnRead || impl_->copies.size() == 1 ||
      impl_->aggregation == VariableAggregation::kOnlyFirstReplica)
    return impl_->copies[0];
  // In replica order, so the aggregate is the same bits every time; on this thread's device
  // (the host, outside the replicas) when the copies are on another kind (GPUs).
  const DeviceKind here = context_device(current_compute_context()).kind;
  auto local = [&](const Tensor& t) { return t.device().kind == here ? t : t.to(context_device(current_compute_context())); };
  Tensor acc = local(impl_->copies[0]);
  for (std::size_t i = 1; i < impl_->copies.size(); ++i) acc = add(acc, local(impl_->copies[i]));
  if (impl_->aggregation == VariableAggregation::kMean)
    acc = scale(acc, 1.0f / static_cast<float>(impl_->copies.size()));
  return acc;
}

VariableSynchronization Variable::synchronization() const {
  return impl_ ? impl_->synchronization : VariableSynchronization::kOnWrite;
}
VariableAggregation Variable::aggregation() const { return impl_ ? impl_->aggregation : VariableAggregation::kNone; }

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

void Variable::set_trainable(bool trainable) const {
  LOCKSTEP_CHECK(impl_, "set_trainable: undefined Variable");
  LOCKSTEP_CHECK(!trainable || impl_->synchronization != VariableSynchronization::kOnRead, "Variable '", impl_->name,
                 "': synchronization kOnRead is only for non-trainable variables (as TensorFlow)");
  impl_->trainable = trainable;
  for (const Tensor& c : impl_->copies) c.impl()->trainable_variable = trainable;
}

void Variable::assign(const Tensor& v) const {
  LOCKSTEP_CHECK(v.shape() == shape(), "Variable '", name(), "': cannot assign shape ", v.shape().str(),
                 " to a variable of shape ", shape().str());
  Tensor src = v.dtype() == value().dtype() ? v : v.to(value().dtype());
  const int r = replica_copy();
  if (r >= 0) {
    impl_->copies[static_cast<std::size_t>(r)].copy_from(src);
    return;
  }
  if (impl_->copies.size() > 1 && impl_->synchronization == VariableSynchronization::kOnRead &&
      impl_->aggregation == VariableAggregation::kSum)
    src = scale(src, 1.0f / static_cast<float>(impl_->copies.size()));  // computed before any copy is written
  for (auto& c : impl_->copies) c.copy_from(src);
}

void Variable::assign_add(const Tensor& delta) const { assign(add(value(), delta)); }
void Variable::assign_sub(const Tensor& delta) const { assign(sub(value(), delta)); }

bool is_trainable_variable_value(const Tensor& t) { return t.defined() && t.impl()->trainable_variable; }

}  // namespace lockstep
