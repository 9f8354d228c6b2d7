// Optimizer updates as fused in-place ops, and the step block they (and dropout) read the step's
// numbers from.
#include <algorithm>
#include <functional>

#include "lockstep/tensor/ops_clip.hpp"
#include "lockstep/tensor/ops_loss_scale.hpp"
#include "lockstep/tensor/ops_update_all.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
void check_slot(const char* op, const Tensor& w, const Tensor& t, const char* what) {
  LOCKSTEP_CHECK(t.defined() && t.dtype() == w.dtype() && t.numel() == w.numel() &&
                     t.device().kind == w.device().kind,
                 op, ": ", what, " ", t.defined() ? t.shape().str() : "undefined", " ",
                 t.defined() ? dtype_name(t.dtype()) : "", " does not match the variable ", w.shape().str(), " ",
                 dtype_name(w.dtype()));
}

backend::AdamStep adam_step(const AdamBetas& b) {
  return {.one_minus_b1 = b.one_minus_beta_1, .one_minus_b2 = b.one_minus_beta_2, .epsilon = b.epsilon};
}
backend::RmspropStep rmsprop_step(const RmspropConstants& c) {
  return {.rho = c.rho, .one_minus_rho = c.one_minus_rho, .epsilon = c.epsilon, .momentum = c.momentum};
}
AdamBetas betas(const AdamConstants& c) {
  return {.one_minus_beta_1 = c.one_minus_beta_1, .one_minus_beta_2 = c.one_minus_beta_2, .epsilon = c.epsilon};
}

// `w`: the tensor the op reads the block for (a variable, dropout's input).
void check_block(const char* op, const Tensor& block, const Tensor& w, const char* what = "variable") {
  LOCKSTEP_CHECK(block.defined() && block.dtype() == DType::kF32 && block.numel() == step_state::kStepBlockFloats &&
                     block.device() == w.device(),
                 op, ": the step block must be a float32 tensor of ", step_state::kStepBlockFloats,
                 " elements on the ", what, "'s device ", w.device().str(), ", got ",
                 block.defined() ? block.shape().str() + " on " + block.device().str() : std::string("undefined"));
}
step_state::StepBlock* block_of(const Tensor& block) {
  return static_cast<step_state::StepBlock*>(const_cast<void*>(block.raw_data()));  // written through its handle
}
}  // namespace

const std::int64_t* detail::dropout_step_at(const char* op, backend::KernelOp k, const DropoutKey& key,
                                            float rate, const Tensor& x) {
  if (key.step_block.defined()) {
    check_block(op, key.step_block, x, "input");
    return &block_of(key.step_block)->state.iterations;
  }
  if (rate > 0)
    if (StepCaptureCheck* check = current_step_capture_check()) [[unlikely]]
      check->block(detail::concat("the op '", op, "' (kernel ", backend::kernel_op_name(k),
                                  ") takes the step that keys dropout as a host value, which a replay would ",
                                  "freeze"));
  return nullptr;
}

namespace {
const step_state::StepBlock* checked_block(const char* op, const Tensor& block, const Tensor& w) {
  check_block(op, block, w);
  return block_of(block);
}
// A block holding host-given numbers, for the updates called with values.
Tensor block_with(const step_state::StepScalars& scalars) {
  step_state::StepBlock b;
  b.scalars = scalars;
  Tensor block = Tensor::empty({step_state::kStepBlockFloats});
  block.copy_from_host(&b, sizeof b);
  return block;
}

struct Pointers {
  std::vector<const void*> grads;
  std::vector<void*> copies;
};

Pointers summed_operands(const char* op, const Tensor& w, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& copies) {
  LOCKSTEP_CHECK(!grads.empty(), op, ": no gradient to sum");
  Pointers p;
  for (const Tensor& g : grads) {
    check_slot(op, w, g, "gradient");
    p.grads.push_back(g.raw_data());
  }
  const auto* wb = static_cast<const std::byte*>(w.raw_data());
  for (const Tensor& c : copies) {
    check_slot(op, w, c, "copy");
    const auto* cb = static_cast<const std::byte*>(c.raw_data());
    LOCKSTEP_CHECK(cb + c.nbytes() <= wb || wb + w.nbytes() <= cb, op, ": a copy overlaps the variable it copies");
    p.copies.push_back(const_cast<void*>(c.raw_data()));  // written through its handle
  }
  return p;
}
}  // namespace

double sum_squares(const Tensor& a) {
  detail::check_float("sum_squares", {&a});
  return kern("sum_squares", a, backend::KernelOp::kSumSquares).sum_squares(ctx(), a.raw_data(), a.numel());
}

Tensor scale_and_clip(const Tensor& a, float scale, float clip) {
  detail::check_float("scale_and_clip", {&a});
  const auto& k = kern("scale_and_clip", a, backend::KernelOp::kScaleClip);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  k.scale_clip(ctx(), a.raw_data(), out.raw_data(), a.numel(), scale, clip);
  return out;
}

namespace {
double* sum_at(const char* op, const Tensor& sums, std::int64_t index, const Tensor& x) {
  LOCKSTEP_CHECK(sums.defined() && sums.dtype() == DType::kF32 && sums.rank() == 1 && sums.numel() % 2 == 0 &&
                     index >= 0 && 2 * index < sums.numel() && sums.device() == x.device(),
                 op, ": the norm sums must be a float32 tensor of 2 elements per sum, over index ", index, ", on ",
                 x.device().str(), ", got ",
                 sums.defined() ? sums.shape().str() + " on " + sums.device().str() : std::string("undefined"));
  return static_cast<double*>(const_cast<void*>(sums.raw_data())) + index;  // written through its handle
}
}  // namespace

Tensor norm_sums(std::int64_t count) {
  LOCKSTEP_CHECK(count >= 1, "norm_sums: count must be >= 1, got ", count);
  return Tensor::zeros({2 * count});
}

void add_sum_squares_(const Tensor& x, Tensor& sums, std::int64_t index) {
  detail::check_float("add_sum_squares", {&x});
  double* acc = sum_at("add_sum_squares", sums, index, x);
  kern("add_sum_squares", x, backend::KernelOp::kSumSquaresAdd).sum_squares_add(ctx(), x.raw_data(), x.numel(), acc);
}

Tensor clip_by_norms(const Tensor& g, const clip_math::NormClip& c, const Tensor& sums, std::int64_t own) {
  detail::check_float("clip_by_norms", {&g});
  const double* global_sq = sum_at("clip_by_norms", sums, 0, g);
  const double* own_sq = sum_at("clip_by_norms", sums, own, g);
  const auto& k = kern("clip_by_norms", g, backend::KernelOp::kClipByNorms);
  Tensor out = Tensor::empty(g.shape(), g.dtype());
  k.clip_by_norms(ctx(), g.raw_data(), out.raw_data(), g.numel(), c, global_sq, own_sq);
  return out;
}

Tensor step_block() { return Tensor::zeros({step_state::kStepBlockFloats}); }  // count 0, step applied

void step_begin_(Tensor& block) {
  check_block("step_begin", block, block);
  kern("step_begin", block, backend::KernelOp::kStepBegin).step_begin(ctx(), block_of(block));
}

void set_step_rule_(Tensor& block, const step_state::StepRule& rule) {
  check_block("step_rule_set", block, block);
  kern("step_rule_set", block, backend::KernelOp::kStepRuleSet).step_rule_set(ctx(), block_of(block), rule);
}

void set_step_count_(Tensor& block, std::int64_t iterations) {
  check_block("set_step_count", block, block);
  kern("set_step_count", block, backend::KernelOp::kStepSet).step_set(ctx(), block_of(block), iterations);
}

void set_loss_scale_(Tensor& block, const loss_scale_math::LossScaleState& state) {
  check_block("loss_scale_set", block, block);
  kern("loss_scale_set", block, backend::KernelOp::kLossScaleSet).loss_scale_set(ctx(), block_of(block), state);
}

loss_scale_math::LossScaleState loss_scale_state(const Tensor& block) {
  check_block("loss_scale_state", block, block);
  step_state::StepBlock b;
  block.copy_to_host(&b, sizeof b);
  return b.loss_scale;
}

Tensor loss_seed(const Tensor& losses, const Tensor& block, double inverse_n, float factor, float weight) {
  constexpr const char* kName = "loss_seed";
  LOCKSTEP_CHECK(losses.defined() || block.defined(), kName, ": needs the losses or a step block");
  const Tensor& on = losses.defined() ? losses : block;
  LOCKSTEP_CHECK(on.dtype() == DType::kF32, kName, ": the losses must be float32, got ", dtype_name(on.dtype()));
  if (block.defined()) check_block(kName, block, on, "losses");
  const auto& k = kern(kName, on, backend::KernelOp::kLossSeed);
  Tensor seed = Tensor::empty(losses.defined() ? losses.shape() : Shape{}, DType::kF32);
  k.loss_seed(ctx(), losses.defined() ? losses.raw_data() : nullptr, seed.numel(), factor, weight,
              block.defined() ? block_of(block) : nullptr, inverse_n, seed.raw_data());
  return seed;
}

Tensor unscale_check(const Tensor& g, Tensor& block) {
  detail::check_float("unscale_check", {&g});
  check_block("unscale_check", block, g);
  const auto& k = kern("unscale_check", g, backend::KernelOp::kUnscaleCheck);
  Tensor out = Tensor::empty(g.shape(), g.dtype());
  k.unscale_check(ctx(), g.raw_data(), out.raw_data(), g.numel(), block_of(block));
  return out;
}

void update_loss_scale_(Tensor& block, std::int64_t growth_steps) {
  check_block("loss_scale_update", block, block);
  kern("loss_scale_update", block, backend::KernelOp::kLossScaleUpdate)
      .loss_scale_update(ctx(), block_of(block), growth_steps);
}

bool step_skipped(const Tensor& block) {
  check_block("step_skipped", block, block);
  step_state::StepState state;
  block.copy_to_host(&state, sizeof state);
  return state.skipped != 0;
}

std::int64_t step_count(const Tensor& block) {
  check_block("step_count", block, block);
  step_state::StepState state;
  block.copy_to_host(&state, sizeof state);
  return step_state::count_after_step(state);
}

void sgd_update_(Tensor& w, Tensor& momentum, const Tensor& g, const Tensor& step, float mu, bool nesterov) {
  const auto& k = kern("SGD", w, backend::KernelOp::kSgdUpdate);
  check_slot("SGD", w, g, "gradient");
  if (momentum.defined()) check_slot("SGD", w, momentum, "momentum");
  k.sgd_update(ctx(), w.raw_data(), momentum.defined() ? momentum.raw_data() : nullptr, g.raw_data(),
               w.numel(), checked_block("SGD", step, w), mu, nesterov);
}

void adam_update_(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, const Tensor& step, const AdamBetas& b) {
  const auto& k = kern("Adam", w, backend::KernelOp::kAdamUpdate);
  check_slot("Adam", w, g, "gradient");
  check_slot("Adam", w, m, "first moment");
  check_slot("Adam", w, v, "second moment");
  k.adam_update(ctx(), w.raw_data(), m.raw_data(), v.raw_data(), g.raw_data(), w.numel(), adam_step(b),
                checked_block("Adam", step, w));
}

void rmsprop_update_(Tensor& w, Tensor& velocity, Tensor& momentum, Tensor& average_gradient, const Tensor& g,
                     const Tensor& step, const RmspropConstants& c) {
  const auto& k = kern("RMSprop", w, backend::KernelOp::kRmspropUpdate);
  check_slot("RMSprop", w, g, "gradient");
  check_slot("RMSprop", w, velocity, "velocity");
  LOCKSTEP_CHECK(momentum.defined() == (c.momentum > 0), "RMSprop: a momentum slot goes with a momentum > 0, got ",
                 momentum.defined() ? "a slot" : "no slot", " and momentum ", c.momentum);
  if (momentum.defined()) check_slot("RMSprop", w, momentum, "momentum");
  if (average_gradient.defined()) check_slot("RMSprop", w, average_gradient, "average gradient");
  const auto raw = [](Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
  k.rmsprop_update(ctx(), w.raw_data(), velocity.raw_data(), raw(momentum), raw(average_gradient), g.raw_data(),
                   w.numel(), rmsprop_step(c), checked_block("RMSprop", step, w));
}

void sgd_update_(Tensor& w, Tensor& momentum, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                 const Tensor& step, float mu, bool nesterov) {
  const auto& k = kern("SGD (summed gradients)", w, backend::KernelOp::kSgdUpdateSummed);
  const Pointers p = summed_operands("SGD", w, grads, copies);
  if (momentum.defined()) check_slot("SGD", w, momentum, "momentum");
  k.sgd_update_summed(ctx(), w.raw_data(), momentum.defined() ? momentum.raw_data() : nullptr, p.grads.data(),
                      static_cast<int>(p.grads.size()), p.copies.data(), static_cast<int>(p.copies.size()),
                      w.numel(), checked_block("SGD", step, w), mu, nesterov);
}

void adam_update_(Tensor& w, Tensor& m, Tensor& v, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                  const Tensor& step, const AdamBetas& b) {
  const auto& k = kern("Adam (summed gradients)", w, backend::KernelOp::kAdamUpdateSummed);
  const Pointers p = summed_operands("Adam", w, grads, copies);
  check_slot("Adam", w, m, "first moment");
  check_slot("Adam", w, v, "second moment");
  k.adam_update_summed(ctx(), w.raw_data(), m.raw_data(), v.raw_data(), p.grads.data(),
                       static_cast<int>(p.grads.size()), p.copies.data(), static_cast<int>(p.copies.size()),
                       w.numel(), adam_step(b), checked_block("Adam", step, w));
}

namespace {
// One slot list of a multi-tensor update: its tensors (one per variable), its name in messages,
// and the descriptor's array it goes to.
struct SlotList {
  std::vector<Tensor>* tensors;
  const char* name;
  void* (backend::MultiUpdateDesc::*at)[backend::MultiUpdateDesc::kMax];
};
constexpr auto kM = &backend::MultiUpdateDesc::m;
constexpr auto kV = &backend::MultiUpdateDesc::v;
constexpr auto kA = &backend::MultiUpdateDesc::a;

// The variables of the lists in launches of at most MultiUpdateDesc::kMax, each checked as the
// one-variable update checks it: `launch` gets each launch's table, descriptor and block.
void for_each_launch(const char* op, backend::KernelOp kernel, std::vector<Tensor>& ws,
                     const std::vector<Tensor>& grads, const std::vector<SlotList>& slots, const Tensor& step,
                     const std::function<void(const backend::KernelTable&, const backend::MultiUpdateDesc&,
                                              const step_state::StepBlock*)>& launch) {
  LOCKSTEP_CHECK(grads.size() == ws.size(), op, ": ", grads.size(), " gradients for ", ws.size(),
                 " variables");
  for (const SlotList& s : slots)
    LOCKSTEP_CHECK(s.tensors->size() == ws.size(), op, ": ", s.tensors->size(), " ", s.name, " slots for ",
                   ws.size(), " variables");
  const step_state::StepBlock* block = nullptr;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    LOCKSTEP_CHECK(ws[i].defined() && ws[i].dtype() == ws[0].dtype(), op, ": variable ", i, " is ",
                   ws[i].defined() ? dtype_name(ws[i].dtype()) : "undefined", ", variable 0 ",
                   dtype_name(ws[0].dtype()));
    block = checked_block(op, step, ws[i]);
    check_slot(op, ws[i], grads[i], "gradient");
    for (const SlotList& s : slots) check_slot(op, ws[i], (*s.tensors)[i], s.name);
  }
  for (std::size_t begin = 0; begin < ws.size(); begin += backend::MultiUpdateDesc::kMax) {
    const std::size_t end = std::min(ws.size(), begin + backend::MultiUpdateDesc::kMax);
    const auto& k = kern(op, ws[begin], kernel);
    backend::MultiUpdateDesc d;
    for (std::size_t i = begin; i < end; ++i, ++d.count) {
      d.w[d.count] = ws[i].raw_data();
      d.g[d.count] = grads[i].raw_data();
      d.n[d.count] = ws[i].numel();
      for (const SlotList& s : slots) (d.*s.at)[d.count] = (*s.tensors)[i].raw_data();
    }
    launch(k, d, block);
  }
}

}  // namespace

void sgd_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& momentums,
                     const std::vector<Tensor>& grads, const Tensor& step, float mu, bool nesterov) {
  std::vector<SlotList> slots;
  if (!momentums.empty() || mu > 0) slots.push_back({&momentums, "momentum", kM});
  for_each_launch(
      "SGD", backend::KernelOp::kSgdUpdateMulti, ws, grads, slots, step,
      [&](const backend::KernelTable& k, const backend::MultiUpdateDesc& d,
          const step_state::StepBlock* block) { k.sgd_update_multi(ctx(), d, block, mu, nesterov); });
}

void adam_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& ms, std::vector<Tensor>& vs,
                      const std::vector<Tensor>& grads, const Tensor& step, const AdamBetas& b) {
  for_each_launch(
      "Adam", backend::KernelOp::kAdamUpdateMulti, ws, grads, {{&ms, "first moment", kM}, {&vs, "second moment", kV}},
      step, [&](const backend::KernelTable& k, const backend::MultiUpdateDesc& d,
                const step_state::StepBlock* block) { k.adam_update_multi(ctx(), d, adam_step(b), block); });
}

void rmsprop_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& velocities, std::vector<Tensor>& momentums,
                         std::vector<Tensor>& averages, const std::vector<Tensor>& grads, const Tensor& step,
                         const RmspropConstants& c) {
  // rmsprop_update_'s rule: momentum slots exactly when momentum > 0; average slots (centered)
  // wherever given.
  LOCKSTEP_CHECK(momentums.empty() == !(c.momentum > 0), "RMSprop: momentum slots go with a momentum > 0, got ",
                 momentums.size(), " momentum slots and momentum ", c.momentum);
  std::vector<SlotList> slots{{&velocities, "velocity", kV}};
  if (!momentums.empty()) slots.push_back({&momentums, "momentum", kM});
  if (!averages.empty()) slots.push_back({&averages, "average gradient", kA});
  for_each_launch("RMSprop", backend::KernelOp::kRmspropUpdateMulti, ws, grads, slots, step,
                  [&](const backend::KernelTable& k, const backend::MultiUpdateDesc& d,
                      const step_state::StepBlock* block) {
                    k.rmsprop_update_multi(ctx(), d, rmsprop_step(c), block);
                  });
}

// With the step's numbers given as values: a block holding them, then the updates above.
void sgd_update_(Tensor& w, Tensor& momentum, const Tensor& g, float lr, float mu, bool nesterov) {
  sgd_update_(w, momentum, g, block_with({.lr = lr}), mu, nesterov);
}

void rmsprop_update_(Tensor& w, Tensor& velocity, Tensor& momentum, Tensor& average_gradient, const Tensor& g,
                     float lr, const RmspropConstants& c) {
  rmsprop_update_(w, velocity, momentum, average_gradient, g, block_with({.lr = lr}), c);
}

void adam_update_(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, const AdamConstants& c) {
  adam_update_(w, m, v, g, block_with({.alpha = c.alpha, .decay = c.decay}), betas(c));
}

void sgd_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& momentums,
                     const std::vector<Tensor>& grads, float lr, float mu, bool nesterov) {
  sgd_update_all_(ws, momentums, grads, block_with({.lr = lr}), mu, nesterov);
}

void adam_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& ms, std::vector<Tensor>& vs,
                      const std::vector<Tensor>& grads, const AdamConstants& c) {
  adam_update_all_(ws, ms, vs, grads, block_with({.alpha = c.alpha, .decay = c.decay}), betas(c));
}

void rmsprop_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& velocities, std::vector<Tensor>& momentums,
                         std::vector<Tensor>& averages, const std::vector<Tensor>& grads, float lr,
                         const RmspropConstants& c) {
  rmsprop_update_all_(ws, velocities, momentums, averages, grads, block_with({.lr = lr}), c);
}

void sgd_update_(Tensor& w, Tensor& momentum, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                 float lr, float mu, bool nesterov) {
  sgd_update_(w, momentum, grads, copies, block_with({.lr = lr}), mu, nesterov);
}

void adam_update_(Tensor& w, Tensor& m, Tensor& v, const std::vector<Tensor>& grads, const std::vector<Tensor>& copies,
                  const AdamConstants& c) {
  adam_update_(w, m, v, grads, copies, block_with({.alpha = c.alpha, .decay = c.decay}), betas(c));
}

}  // namespace lockstep
