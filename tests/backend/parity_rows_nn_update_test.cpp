// Parity rows: losses and their gradients, dropout, and the fused optimizer updates.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <tuple>

#include "backend/dropout_rng.hpp"
#include "backend/parity.hpp"
#include "lockstep/tensor/ops_clip.hpp"
#include "lockstep/tensor/ops_loss_scale.hpp"
#include "lockstep/tensor/ops_random.hpp"
#include "lockstep/tensor/ops_recurrent.hpp"
#include "lockstep/tensor/ops_softmax_xent.hpp"
#include "lockstep/tensor/ops_update_all.hpp"

namespace lockstep::parity {

namespace {
using backend::KernelOp;

struct Lse {
  double max, lse;
};
Lse lse_of(const Host& x, std::int64_t r, std::int64_t cols) {
  double m = -INFINITY, s = 0;
  for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
  for (std::int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
  return {m, m + std::log(s)};
}

struct XentCase {
  const char* variant;
  std::int64_t rows, cols;
  DType label_dtype;
  Shape label_shape;
  Gen logits;
};

// The loss alone, or with the softmax beside (the kernel a softmax output layer and its loss share).
Row sparse_xent_row(const XentCase& c, bool with_softmax) {
  const char* op = "sparse_softmax_cross_entropy_with_logits";
  std::vector<Need> needs{{with_softmax ? KernelOp::kSoftmaxSparseXent : KernelOp::kSparseSoftmaxXent, {}},
                          {KernelOp::kFirstOutside, c.label_dtype}};
  if (c.label_dtype != DType::kI64) needs.push_back({KernelOp::kCast, c.label_dtype});
  return make_row(
      with_softmax ? "sparse_softmax_cross_entropy_and_softmax" : op, c.variant, op, floats(), needs,
      {{c.label_shape, labels(c.cols), c.label_dtype}, {{c.rows, c.cols}, c.logits, {}}},
      [with_softmax](const std::vector<Tensor>& in, DType) {
        if (!with_softmax) return std::vector<Tensor>{sparse_softmax_cross_entropy_with_logits(in[0], in[1])};
        const LossAndSoftmax both = sparse_softmax_cross_entropy_and_softmax(in[0], in[1]);
        return std::vector<Tensor>{both.loss, both.softmax};
      },
      [c, with_softmax](const std::vector<Host>& in, DType) {
        Expected e({c.rows}), p({c.rows, c.cols});
        for (std::int64_t r = 0; r < c.rows; ++r) {
          const Lse l = lse_of(in[1], r, c.cols);
          const double xl = in[1][r * c.cols + static_cast<std::int64_t>(in[0][r])];
          e.set(r, l.lse - xl, std::fabs(xl) + std::fabs(l.max) + std::fabs(l.lse));
          for (std::int64_t k = 0; k < c.cols; ++k) p.set(r * c.cols + k, std::exp(in[1][r * c.cols + k] - l.lse));
        }
        if (!with_softmax) return std::vector<Expected>{e};
        return std::vector<Expected>{e, p};
      });
}

// The gradient inputs of an update row: one gradient (parts == 0), or `parts` replicas'
// gradients for the summed kernels (GradientShard::parts), whose sum the reference rounds to
// float32 in order, as combine's kSum does, so the rest of the row checks the update alone.
void add_gradients(std::vector<InputSpec>& inputs, const Shape& s, int parts) {
  for (int j = 0; j < std::max(parts, 1); ++j) inputs.push_back({s, uniform(-1, 1), {}});
}
double gradient_at(const std::vector<Host>& in, std::size_t first, int parts, std::int64_t i) {
  if (parts == 0) return in[first][i];
  float g = static_cast<float>(in[first][i]);
  for (int j = 1; j < parts; ++j) g += static_cast<float>(in[first + static_cast<std::size_t>(j)][i]);
  return g;
}
std::vector<Tensor> gradients_of(const std::vector<Tensor>& in, std::size_t first) {
  return {in.begin() + static_cast<std::ptrdiff_t>(first), in.end()};
}
// The summed kernels also write the new weights into two other copies: the same values as w.
constexpr int kCopies = 2;
std::vector<Tensor> fresh_copies(const Shape& s) {
  std::vector<Tensor> c;
  for (int j = 0; j < kCopies; ++j) c.push_back(Tensor::zeros(s));
  return c;
}

// A multi-tensor row's variables: t's elements as three, of 1, 20000 and the rest (handles on t).
std::vector<Tensor> three_of(const Tensor& t) {
  return {t.slice(0, 1), t.slice(1, 20001), t.slice(20001, t.numel())};
}

// One Keras SGD step: the variable (and momentum) after it; with `parts`, the summed kernel; with
// `multi`, the multi-tensor kernel on the variable cut in three.
Row sgd_row(const char* key, bool momentum, bool nesterov, int parts = 0, bool multi = false) {
  const Shape s{67591};
  constexpr float kLr = 0.05f, kMu = 0.9f;
  std::vector<InputSpec> inputs{{s, uniform(-1, 1), {}}};
  if (momentum) inputs.push_back({s, uniform(-0.1, 0.1), {}});
  const std::size_t first = inputs.size();
  add_gradients(inputs, s, parts);
  return make_row(
      key, "grain", "SGD", floats(),
      {{multi   ? KernelOp::kSgdUpdateMulti
        : parts ? KernelOp::kSgdUpdateSummed
                : KernelOp::kSgdUpdate,
        {}}},
      inputs,
      [=](const std::vector<Tensor>& in, DType) {
        Tensor w = in[0].clone(), m = momentum ? in[1].clone() : Tensor();
        std::vector<Tensor> out;
        if (multi) {
          std::vector<Tensor> ws = three_of(w), ms = momentum ? three_of(m) : std::vector<Tensor>{};
          sgd_update_all_(ws, ms, three_of(in.back()), kLr, momentum ? kMu : 0.0f, nesterov);
        } else if (parts) {
          const std::vector<Tensor> copies = fresh_copies(s);
          sgd_update_(w, m, gradients_of(in, first), copies, kLr, momentum ? kMu : 0.0f, nesterov);
          out = copies;
        } else {
          sgd_update_(w, m, in.back(), kLr, momentum ? kMu : 0.0f, nesterov);
        }
        out.insert(out.begin(), w);
        if (momentum) out.insert(out.begin() + 1, m);
        return out;
      },
      [=](const std::vector<Host>& in, DType) {
        const double lr = kLr, mu = kMu;
        Expected w(s), m(s);
        for (std::int64_t i = 0; i < s.numel(); ++i) {
          const double wi = in[0][i], g = gradient_at(in, first, parts, i);
          if (!momentum) {
            w.set(i, wi - lr * g, 0, std::fabs(wi) + std::fabs(lr * g));
            continue;
          }
          const double mi = mu * in[1][i] - lr * g;
          m.set(i, mi, 0, std::fabs(mu * in[1][i]) + std::fabs(lr * g));
          const double step = nesterov ? mu * mi - lr * g : mi;
          w.set(i, wi + step, 0, std::fabs(wi) + std::fabs(mi) + std::fabs(lr * g));
        }
        std::vector<Expected> out{w};
        if (momentum) out.push_back(m);
        for (int j = 0; parts && j < kCopies; ++j) out.push_back(w);
        return out;
      });
}

Row adam_row(const char* key, float decay, int parts = 0, bool multi = false) {
  const Shape s{67591};
  const AdamConstants k{.alpha = 1e-3f, .one_minus_beta_1 = 0.1f, .one_minus_beta_2 = 0.001f, .epsilon = 1e-7f,
                        .decay = decay};
  std::vector<InputSpec> inputs{{s, uniform(-1, 1), {}}, {s, uniform(-0.1, 0.1), {}}, {s, uniform(0, 0.01), {}}};
  constexpr std::size_t first = 3;
  add_gradients(inputs, s, parts);
  return make_row(
      key, "grain", "Adam", floats(),
      {{multi   ? KernelOp::kAdamUpdateMulti
        : parts ? KernelOp::kAdamUpdateSummed
                : KernelOp::kAdamUpdate,
        {}}},
      inputs,
      [=](const std::vector<Tensor>& in, DType) {
        Tensor w = in[0].clone(), m = in[1].clone(), v = in[2].clone();
        std::vector<Tensor> out;
        if (multi) {
          std::vector<Tensor> ws = three_of(w), ms = three_of(m), vs = three_of(v);
          adam_update_all_(ws, ms, vs, three_of(in[3]), k);
        } else if (parts) {
          out = fresh_copies(s);
          adam_update_(w, m, v, gradients_of(in, first), out, k);
        } else {
          adam_update_(w, m, v, in[3], k);
        }
        out.insert(out.begin(), {w, m, v});
        return out;
      },
      [=](const std::vector<Host>& in, DType) {
        Expected w(s), m(s), v(s);
        const double b1 = k.one_minus_beta_1, b2 = k.one_minus_beta_2;
        for (std::int64_t i = 0; i < s.numel(); ++i) {
          const double g = gradient_at(in, first, parts, i), mi = in[1][i] + (g - in[1][i]) * b1,
                       vi = in[2][i] + (g * g - in[2][i]) * b2;
          m.set(i, mi, 0, std::fabs(in[1][i]) + std::fabs((g - in[1][i]) * b1));
          v.set(i, vi, 0, std::fabs(in[2][i]) + std::fabs((g * g - in[2][i]) * b2));
          const double step = k.alpha * mi / (std::sqrt(vi) + k.epsilon);
          w.set(i, in[0][i] - in[0][i] * k.decay - step, 0, std::fabs(in[0][i]) + std::fabs(step));
        }
        std::vector<Expected> out{w, m, v};
        for (int j = 0; parts && j < kCopies; ++j) out.push_back(w);
        return out;
      });
}

// One Keras RMSprop step (velocity, and momentum / average gradient where asked): the variable
// and its slots after it, against the rule in double; with `multi`, the multi-tensor kernel on
// the variable cut in three.
Row rmsprop_row(const char* key, bool centered, float momentum, bool multi = false) {
  const Shape s{67591};
  constexpr float kLr = 1e-3f;
  const RmspropConstants k{.rho = 0.9f, .one_minus_rho = static_cast<float>(1.0 - 0.9), .epsilon = 1e-7f,
                           .momentum = momentum};
  std::vector<InputSpec> inputs{{s, uniform(-1, 1), {}}, {s, uniform(0.01, 0.1), {}}};
  if (momentum > 0) inputs.push_back({s, uniform(-0.01, 0.01), {}});
  if (centered) inputs.push_back({s, uniform(-0.05, 0.05), {}});  // a^2 < v: the variance stays positive
  const std::size_t first = inputs.size();
  add_gradients(inputs, s, 0);
  return make_row(
      key, "grain", "RMSprop", floats(), {{multi ? KernelOp::kRmspropUpdateMulti : KernelOp::kRmspropUpdate, {}}},
      inputs,
      [=](const std::vector<Tensor>& in, DType) {
        Tensor w = in[0].clone(), v = in[1].clone();
        std::size_t next = 2;
        Tensor m = momentum > 0 ? in[next++].clone() : Tensor();
        Tensor a = centered ? in[next].clone() : Tensor();
        if (multi) {
          std::vector<Tensor> ws = three_of(w), vs = three_of(v);
          std::vector<Tensor> ms = m.defined() ? three_of(m) : std::vector<Tensor>{};
          std::vector<Tensor> as = a.defined() ? three_of(a) : std::vector<Tensor>{};
          rmsprop_update_all_(ws, vs, ms, as, three_of(in[first]), kLr, k);
        } else {
          rmsprop_update_(w, v, m, a, in[first], kLr, k);
        }
        std::vector<Tensor> out{w, v};
        if (m.defined()) out.push_back(m);
        if (a.defined()) out.push_back(a);
        return out;
      },
      [=](const std::vector<Host>& in, DType) {
        Expected w(s), v(s), m(s), a(s);
        const double rho = k.rho, one_rho = k.one_minus_rho, mu = k.momentum;
        for (std::int64_t i = 0; i < s.numel(); ++i) {
          std::size_t next = 2;
          const double g = in[first][i], m0 = momentum > 0 ? in[next++][i] : 0, a0 = centered ? in[next][i] : 0;
          const double vi = rho * in[1][i] + one_rho * g * g;
          v.set(i, vi, 0, rho * in[1][i] + one_rho * g * g);
          double d = vi + k.epsilon, d_mag = vi;
          if (centered) {
            const double ai = rho * a0 + one_rho * g;
            a.set(i, ai, 0, std::fabs(rho * a0) + std::fabs(one_rho * g));
            d = vi - ai * ai + k.epsilon;
            d_mag = vi + ai * ai;  // the subtraction's cancellation
          }
          const double x = kLr * g / std::sqrt(d);
          const double x_mag = std::fabs(x) * d_mag / d;  // d's rounding, relative to the difference
          double step = x, step_mag = x_mag;
          if (momentum > 0) {
            step = mu * m0 + x;
            step_mag = std::fabs(mu * m0) + x_mag;
            m.set(i, step, 0, step_mag);
          }
          w.set(i, in[0][i] - step, 0, std::fabs(in[0][i]) + step_mag);
        }
        std::vector<Expected> out{w, v};
        if (momentum > 0) out.push_back(m);
        if (centered) out.push_back(a);
        return out;
      });
}

// clamp(x * scale, -clip, clip); NaN stays NaN (a non-finite gradient must stay visible).
Row scale_and_clip_row(const char* variant, const Shape& s, const Gen& gen, float sc, float cl) {
  return make_row(
      "scale_and_clip", variant, "scale_and_clip", floats(), {{KernelOp::kScaleClip, {}}}, {{s, gen, {}}},
      [=](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{scale_and_clip(in[0], sc, cl)}; },
      [=](const std::vector<Host>& in, DType) {
        Expected e(s);
        const double c = cl;
        for (std::int64_t i = 0; i < s.numel(); ++i) {
          const double v = in[0][i] * static_cast<double>(sc);
          e.set(i, std::isnan(v) ? v : std::min(std::max(v, -c), c));
        }
        return std::vector<Expected>{e};
      });
}

// The loss scale kept in a step block: written (1024, one finite step counted), the loss factor
// of a mean over 3 examples, g unscaled and checked in one pass, and the scale moved (growth after
// 2 finite steps: doubled when g is finite, halved and the step counted skipped when not).
Row loss_scale_row(const char* variant, const Gen& gen) {
  const Shape s{4099};
  return make_row(
      "loss_scale", variant, "unscale_check", floats(),
      {{KernelOp::kLossScaleSet, DType::kF32},
       {KernelOp::kLossSeed, DType::kF32},
       {KernelOp::kUnscaleCheck, {}},
       {KernelOp::kLossScaleUpdate, DType::kF32}},
      {{s, gen, {}}},
      [](const std::vector<Tensor>& in, DType) {
        Tensor block = step_block();
        set_loss_scale_(block, {.scale = 1024, .counter = 1, .skipped = 0});
        const Tensor factor = loss_seed(Tensor(), block, 1.0 / 3.0, 0.0f);
        const Tensor g = unscale_check(in[0], block);
        const bool skipped = step_skipped(block);
        update_loss_scale_(block, 2);
        const auto st = loss_scale_state(block);
        const std::vector<float> state{static_cast<float>(st.scale), static_cast<float>(st.counter),
                                       static_cast<float>(st.skipped), skipped ? 1.0f : 0.0f};
        return std::vector<Tensor>{factor, g, Tensor::from_vector(state, Shape{4})};
      },
      [=](const std::vector<Host>& in, DType) {
        Expected factor(Shape{}), g(s), state(Shape{4});
        factor.set(0, 1024.0 / 3.0);
        bool finite = true;
        for (std::int64_t i = 0; i < s.numel(); ++i) {
          g.set(i, in[0][i] / 1024.0);
          finite = finite && std::isfinite(in[0][i]);
        }
        state.set(0, finite ? 2048 : 512);
        state.set(1, 0);
        state.set(2, finite ? 0 : 1);
        state.set(3, finite ? 0 : 1);
        return std::vector<Expected>{factor, g, state};
      });
}

// Clipping by norm on the device: squared norms summed into device memory (sum_squares_add):
// of g and h at 0, of g alone at 1.
Row add_sum_squares_row() {
  const Shape sg{4099}, sh{37};
  return make_row(
      "add_sum_squares", "two", "add_sum_squares", floats(), {{KernelOp::kSumSquaresAdd, {}}},
      {{sg, uniform(-2, 2), {}}, {sh, uniform(-2, 2), {}}},
      [](const std::vector<Tensor>& in, DType) {
        Tensor sums = norm_sums(2);
        add_sum_squares_(in[0], sums, 0);
        add_sum_squares_(in[1], sums, 0);
        add_sum_squares_(in[0], sums, 1);
        double host[2];
        sums.copy_to_host(host, sizeof host);
        return std::vector<Tensor>{Tensor::scalar(host[0], DType::kF32), Tensor::scalar(host[1], DType::kF32)};
      },
      [](const std::vector<Host>& in, DType) {
        Expected all(Shape{}), own(Shape{});
        double g = 0, h = 0;
        for (double v : in[0].v) g += v * v;
        for (double v : in[1].v) h += v * v;
        all.set(0, g + h);
        own.set(0, g);
        return std::vector<Expected>{all, own};
      });
}

// g scaled by both clips from squared norms in device memory, then clamped (clip_by_norms).
Row clip_by_norms_row() {
  const Shape s{4099};
  const double global_sq = 900.0, own_sq = 600.0;  // norms 30 and about 24.5
  const clip_math::NormClip c{.global_clipnorm = 10.0, .clipnorm = 5.0, .clipvalue = 0.1f};
  return make_row(
      "clip_by_norms", "both", "clip_by_norms", floats(), {{KernelOp::kClipByNorms, {}}}, {{s, uniform(-2, 2), {}}},
      [=](const std::vector<Tensor>& in, DType) {
        Tensor sums = norm_sums(2);
        const double host[2] = {global_sq, own_sq};
        sums.copy_from_host(host, sizeof host);
        return std::vector<Tensor>{clip_by_norms(in[0], c, sums, 1)};
      },
      [=](const std::vector<Host>& in, DType) {
        const double factor = c.global_clipnorm / std::sqrt(global_sq) * (c.clipnorm / std::sqrt(own_sq));
        Expected e(s);
        for (std::int64_t i = 0; i < s.numel(); ++i) {
          const double v = in[0][i] * factor, cl = c.clipvalue;
          e.set(i, std::min(std::max(v, -cl), cl));
        }
        return std::vector<Expected>{e};
      });
}

// Dropout's mask is random: each output is 0 or x / (1 - rate), and about `rate` of them are 0.
// In 16 bits the mask value and the product are rounded once each: at most half an ulp each,
// 2^-11 for float16, 2^-8 for bfloat16 (relative).
Row dropout_row(const char* variant, const Shape& s, float rate) {
  // check() sees host values only: run() tells it the dtype it just ran in.
  auto ran_in = std::make_shared<DType>(DType::kF32);
  Row r = make_row(
      "dropout", variant, "dropout", floats(), {{KernelOp::kDropout, {}}},
      {{s, away_from_zero(-1, 1, 0.01), {}}},
      [rate, ran_in](const std::vector<Tensor>& in, DType dt) {
        *ran_in = dt;
        return std::vector<Tensor>{dropout(in[0], rate, {.seed = 11, .stream = 2, .step = 7, .first_example = 5})};
      },
      nullptr);
  r.check = [rate, ran_in](const std::vector<Host>& in, const std::vector<Host>& out) {
    const double tol = *ran_in == DType::kF32 ? 1e-5 : *ran_in == DType::kF16 ? 1.0 / 1024 : 1.0 / 128;
    int bad = 0;
    std::int64_t zeros = 0;
    const double keep = 1.0 / (1.0 - static_cast<double>(rate));
    for (std::int64_t i = 0; i < in[0].numel(); ++i) {
      const double x = in[0][i], y = out[0][i];
      if (y == 0) {
        ++zeros;
      } else if (std::fabs(y - x * keep) > tol * std::fabs(x * keep)) {
        if (++bad <= 4) ADD_FAILURE() << "element " << i << ": " << y << " is neither 0 nor " << x * keep;
      }
    }
    const double n = static_cast<double>(in[0].numel()), p = static_cast<double>(rate);
    const double share = static_cast<double>(zeros) / n, sigma = std::sqrt(p * (1 - p) / n);
    if (std::fabs(share - p) > 5 * sigma) {
      ADD_FAILURE() << "dropped " << share << " of the units, expected " << p << " +- " << 5 * sigma;
      ++bad;
    }
    return bad;
  };
  return r;
}
// random_fill's draws (standard_normal_like, uniform_like) against the rule written out here: the
// dropout keying's unit hash (dropout_rng.hpp's mix cascade), then the uniform's top 24 bits times
// 2^-24 (exact) or Box-Muller in double as the host drew the noise before the kernel, rounded to
// the dtype (a backend's log and cos may move the float32 result by an ulp: dropout_rng.hpp).
Row random_fill_row(bool normal, const char* variant, const Shape& s) {
  static const DropoutKey kKey{.seed = 11, .stream = 2, .step = 7, .first_example = 5};
  return make_row(
      normal ? "random_fill_normal" : "random_fill_uniform", variant,
      normal ? "standard_normal_like" : "uniform_like", floats(), {{KernelOp::kRandomFill, {}}},
      {{s, uniform(-1, 1), {}}},
      [normal](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{normal ? standard_normal_like(in[0], kKey) : uniform_like(in[0], kKey)};
      },
      [normal, s](const std::vector<Host>&, DType) {
        namespace rng = backend::dropout;
        Expected e(s);
        const std::int64_t rows = s.rank() ? s.dims()[0] : 1, cols = rows ? s.numel() / rows : 0;
        const std::uint64_t step = rng::step_key(kKey.seed, kKey.stream, kKey.step);
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::uint64_t row = rng::row_key(step, kKey.first_example + r);
          for (std::int64_t c = 0; c < cols; ++c) {
            const std::uint64_t h = rng::mix(row + static_cast<std::uint64_t>(c));
            double v = static_cast<double>(h >> 40) / 16777216.0;
            if (normal) {
              const double u1 = (static_cast<double>(h >> 32) + 0.5) / 4294967296.0;
              const double u2 = static_cast<double>(h & 0xffffffffULL) / 4294967296.0;
              v = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
            }
            e.set(r * cols + c, v);
          }
        }
        return std::vector<Expected>{e};
      });
}

// The step's numbers (step_state.hpp): a block's count set, the scalars of an AdamW step under a
// CosineDecay with warmup derived from it, the count advanced, and the next step's derived; the
// reference is Keras' formulas written out here.
Row step_row() {
  constexpr std::int64_t kStep = 41;
  constexpr double kB1 = 0.9, kB2 = 0.999, kWd = 0.004;
  step_state::StepRule rule;
  rule.schedule.kind = schedule_math::ScheduleKind::kCosine;
  rule.schedule.initial = 1e-4;
  rule.schedule.decay_steps = 100;
  rule.schedule.alpha = 0.1;
  rule.schedule.has_warmup_target = true;
  rule.schedule.warmup_target = 2e-3;
  rule.schedule.warmup_steps = 30;
  rule.kind = step_state::RuleKind::kAdam;
  rule.beta_1 = kB1;
  rule.beta_2 = kB2;
  rule.weight_decay = kWd;
  Row r = make_row(
      "step_begin_end", "adamw_cosine", "step_begin", {DType::kF32},
      {{KernelOp::kStepSet, {}}, {KernelOp::kStepRuleSet, {}}, {KernelOp::kStepBegin, {}}},
      {{Shape{1}, uniform(0, 1), {}}},
      [=](const std::vector<Tensor>&, DType) {
        Tensor block = step_block();
        set_step_count_(block, kStep);
        set_step_rule_(block, rule);
        step_begin_(block);
        const Tensor first = block.slice(4, 7).clone();  // lr, alpha, decay: after the 16-byte StepState
        step_begin_(block);  // the step begun at kStep counted, then kStep + 1's numbers
        const Tensor second = block.slice(4, 7).clone();
        const auto count = static_cast<float>(step_count(block));
        return std::vector<Tensor>{first, second, Tensor::from_vector(std::vector<float>{count}, Shape{1})};
      },
      [=](const std::vector<Host>&, DType) {
        const auto scalars = [&](std::int64_t step) {
          const double s = static_cast<double>(std::min<std::int64_t>(step, 130));
          const double lr = s < 30 ? (2e-3 - 1e-4) * (s / 30.0) + 1e-4
                                   : 2e-3 * (0.9 * 0.5 * (1 + std::cos(std::numbers::pi * (s - 30.0) / 100.0)) + 0.1);
          const double t = static_cast<double>(step + 1);
          Expected e({3});
          e.set(0, lr);
          e.set(1, lr * std::sqrt(1 - std::pow(kB2, t)) / (1 - std::pow(kB1, t)), 0, 8 * lr);
          e.set(2, lr * kWd);
          return e;
        };
        Expected count({1});
        count.set(0, static_cast<double>(kStep + 2));  // once the step begun at kStep + 1 ends
        return std::vector<Expected>{scalars(kStep), scalars(kStep + 1), count};
      });
  r.only = {DType::kF32};
  return r;
}

// argmax's rule on host values: the first largest, NaN winning.
std::int64_t first_largest(const Host& h, std::int64_t begin, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t c = 1; c < n && !std::isnan(h[begin + best]); ++c)
    if (h[begin + c] > h[begin + best] || std::isnan(h[begin + c])) best = c;
  return best;
}

// An accuracy metric's batch state in one kernel: 9 rows of 4 classes with ties (and NaN rows),
// against int64 labels, float32 labels compared as floats (one off the classes: 1.5), or one-hot
// rows with ties of their own.
enum class AccuracyLabels { kInt64, kFloat, kOneHot };
Row accuracy_state_row(const char* variant, AccuracyLabels kind, const Gen& pred) {
  const bool one_hot = kind == AccuracyLabels::kOneHot;
  const DType label_dtype = kind == AccuracyLabels::kInt64 ? DType::kI64 : DType::kF32;
  const InputSpec labels_in =
      one_hot ? InputSpec{{9, 4}, coarse(), DType::kF32} : InputSpec{{9}, labels(4), label_dtype};
  return make_row(
      "accuracy_state", variant, "accuracy_state", floats(), {{KernelOp::kAccuracyState, {}}},
      {labels_in, {{9, 4}, pred, {}}},
      [kind](const std::vector<Tensor>& in, DType) {
        Tensor l = in[0];
        if (kind == AccuracyLabels::kFloat) {  // a label that is no class: never a match
          std::vector<float> v = l.to_vector<float>();
          v[3] = 1.5f;
          l = Tensor::from_vector(v, l.shape()).to(in[0].device());
        }
        return std::vector<Tensor>{accuracy_state(l, in[1], kind != AccuracyLabels::kInt64)};
      },
      [kind, one_hot](const std::vector<Host>& in, DType) {
        double matches = 0;
        for (std::int64_t r = 0; r < 9; ++r) {
          const double label = one_hot ? static_cast<double>(first_largest(in[0], r * 4, 4))
                               : kind == AccuracyLabels::kFloat && r == 3 ? 1.5
                                                                           : in[0][r];
          matches += static_cast<double>(first_largest(in[1], r * 4, 4)) == label ? 1 : 0;
        }
        Expected e({2});
        e.set(0, matches);
        e.set(1, 9);
        return std::vector<Expected>{e};
      },
      Match::kExact);
}

// The step's loss gradient (loss_seed): the factor * the output's weight at each per-example loss,
// one that is not finite too (sum's backward, as TF's); the factor the host's, or the block's
// loss_factor(1/4, scale 8) = 2; the weight 1, or 0.375 (an output's in a model of several).
Row loss_seed_row(const char* variant, bool on_device, float weight) {
  const Shape s{67};
  Row r = make_row(
      "loss_seed", variant, "loss_seed", {DType::kF32}, {{KernelOp::kLossSeed, {}}}, {{s, specials(), {}}},
      [on_device, weight](const std::vector<Tensor>& in, DType) {
        Tensor block = step_block();
        set_loss_scale_(block, {.scale = 8, .counter = 0, .skipped = 0});
        return std::vector<Tensor>{loss_seed(in[0], on_device ? block : Tensor(), 0.25, 0.75f, weight)};
      },
      [=](const std::vector<Host>&, DType) {
        Expected e(s);
        for (std::int64_t i = 0; i < s.numel(); ++i) e.set(i, (on_device ? 2.0 : 0.75) * weight);
        return std::vector<Expected>{e};
      },
      Match::kExact);
  r.only = {DType::kF32};
  return r;
}

}  // namespace

std::vector<Row> nn_update_rows() {
  std::vector<Row> rows;
  const XentCase xent_cases[] = {
      {"i64_labels", 7, 5, DType::kI64, {7}, uniform(-3, 3)},
      {"i32_labels", 7, 5, DType::kI32, {7}, uniform(-3, 3)},
      {"u8_labels_2d", 7, 5, DType::kU8, {7, 1}, uniform(-3, 3)},
      {"grain", 300, 257, DType::kI64, {300}, uniform(-3, 3)},
      {"stable", 6, 4, DType::kI64, {6}, uniform(80, 100)},
  };
  for (const XentCase& c : xent_cases) rows.push_back(sparse_xent_row(c, false));
  for (const XentCase& c : xent_cases) rows.push_back(sparse_xent_row(c, true));

  rows.push_back(make_row(
      "softmax_cross_entropy_with_logits", "odd", "softmax_cross_entropy_with_logits", floats(),
      {{KernelOp::kSoftmax, {}}, {KernelOp::kBinary, {}}, {KernelOp::kReduceSum, {}}, {KernelOp::kUnary, {}}},
      {{{6, 5}, uniform(0, 1), {}}, {{6, 5}, uniform(-3, 3), {}}},
      [](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{softmax_cross_entropy_with_logits(in[0], in[1])};
      },
      [](const std::vector<Host>& in, DType) {
        // Composed of log_softmax, mul and sum: a 16-bit row rounds each term twice.
        Expected e({6});
        for (std::int64_t r = 0; r < 6; ++r) {
          const Lse l = lse_of(in[1], r, 5);
          double s = 0, terms = 0, acc = 0;
          for (std::int64_t c = 0; c < 5; ++c) {
            const double t = in[0][r * 5 + c], ls = in[1][r * 5 + c] - l.lse;
            s -= t * ls;
            terms += std::fabs(t * ls);
            acc += std::fabs(t) * (std::fabs(in[1][r * 5 + c]) + std::fabs(l.lse));
          }
          e.set(r, s, acc + terms, 2 * terms);
        }
        return std::vector<Expected>{e};
      }));

  for (const Shape& s : {Shape{7, 5}, Shape{300, 257}}) {
    rows.push_back(make_row(
        "sparse_softmax_cross_entropy_grad", s[0] > 100 ? "grain" : "odd", "sparse_softmax_cross_entropy_grad",
        floats(), {{KernelOp::kSparseSoftmaxXentBackward, {}}},
        {{s, uniform(0, 1), {}}, {{s[0]}, labels(s[1]), DType::kI64}, {{s[0]}, uniform(-1, 1), {}}},
        [](const std::vector<Tensor>& in, DType) {
          return std::vector<Tensor>{sparse_softmax_cross_entropy_grad(in[0], in[1], in[2])};
        },
        [s](const std::vector<Host>& in, DType) {
          Expected e(s);
          for (std::int64_t r = 0; r < s[0]; ++r)
            for (std::int64_t c = 0; c < s[1]; ++c)
              e.set(r * s[1] + c, (in[0][r * s[1] + c] - (c == static_cast<std::int64_t>(in[1][r]) ? 1 : 0)) * in[2][r],
                    std::fabs(in[2][r]));
          return std::vector<Expected>{e};
        }));
  }

  // BatchNormalization's fused passes: a small odd case, and one past the grain and the row
  // partition (4099 rows: parts of unequal length, run in parallel).
  for (const Shape& s : {Shape{7, 5}, Shape{4099, 33}}) {
    const std::string variant = s[0] > 100 ? "grain" : "odd";
    const std::int64_t rows_n = s[0], cols = s[1];
    const Shape c{cols};
    const auto at = [cols](std::int64_t r, std::int64_t k) { return r * cols + k; };
    rows.push_back(make_row(
        "batch_norm_squared_deviations", variant, "batch_norm_squared_deviations", floats(),
        {{KernelOp::kBatchNormReduce, {}}}, {{s, uniform(-2, 2), {}}, {c, uniform(-0.5, 0.5), {}}},
        [](const std::vector<Tensor>& in, DType) {
          return std::vector<Tensor>{batch_norm_squared_deviations(in[0], in[1])};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected e(c);
          for (std::int64_t k = 0; k < cols; ++k) {
            double sum = 0, mag = 0;
            for (std::int64_t r = 0; r < rows_n; ++r) {
              const double d = in[0][at(r, k)] - in[1][k];
              sum += d * d;
              mag += std::fabs(d) * (std::fabs(in[0][at(r, k)]) + std::fabs(in[1][k]));
            }
            e.set(k, sum, 0, 2 * mag);
          }
          return std::vector<Expected>{e};
        }));
    for (const bool offset : {true, false}) {
      rows.push_back(make_row(
          offset ? "batch_norm_apply" : "batch_norm_apply_no_offset", variant, "batch_norm_apply", floats(),
          {{KernelOp::kBatchNormApply, {}}},
          {{s, uniform(-2, 2), {}}, {c, uniform(-0.5, 0.5), {}}, {c, uniform(-3, 3), {}}, {c, uniform(-1, 1), {}}},
          [offset](const std::vector<Tensor>& in, DType) {
            return std::vector<Tensor>{batch_norm_apply(in[0], in[1], in[2], offset ? in[3] : Tensor())};
          },
          [=](const std::vector<Host>& in, DType) {
            Expected e(s);
            for (std::int64_t r = 0; r < rows_n; ++r)
              for (std::int64_t k = 0; k < cols; ++k) {
                const double x = in[0][at(r, k)], m = in[1][k], sc = in[2][k], o = offset ? in[3][k] : 0.0;
                e.set(at(r, k), (x - m) * sc + o, 0, (std::fabs(x) + std::fabs(m)) * std::fabs(sc) + std::fabs(o));
              }
            return std::vector<Expected>{e};
          }));
    }
    rows.push_back(make_row(
        "batch_norm_grad_sums", variant, "batch_norm_grad_sums", floats(), {{KernelOp::kBatchNormReduce, {}}},
        {{s, uniform(-1, 1), {}}, {s, uniform(-2, 2), {}}, {c, uniform(-0.5, 0.5), {}}, {c, uniform(0.5, 2), {}}},
        [](const std::vector<Tensor>& in, DType) {
          const auto sums = batch_norm_grad_sums(in[0], in[1], in[2], in[3]);
          return std::vector<Tensor>{sums[0], sums[1]};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected dy_sum(c), dy_xhat_sum(c);
          for (std::int64_t k = 0; k < cols; ++k) {
            double a = 0, b = 0, a_terms = 0, b_terms = 0;
            for (std::int64_t r = 0; r < rows_n; ++r) {
              const double g = in[0][at(r, k)], x = in[1][at(r, k)], m = in[2][k], is = in[3][k];
              a += g;
              b += g * (x - m) * is;
              a_terms += std::fabs(g);
              b_terms += std::fabs(g) * (std::fabs(x) + std::fabs(m)) * is;
            }
            dy_sum.set(k, a, 0, a_terms);
            dy_xhat_sum.set(k, b, 0, 3 * b_terms);
          }
          return std::vector<Expected>{dy_sum, dy_xhat_sum};
        }));
    rows.push_back(make_row(
        "batch_norm_input_grad", variant, "batch_norm_input_grad", floats(), {{KernelOp::kBatchNormBackward, {}}},
        {{s, uniform(-1, 1), {}}, {s, uniform(-2, 2), {}}, {c, uniform(-0.5, 0.5), {}}, {c, uniform(0.5, 2), {}},
         {c, uniform(-3, 3), {}}, {c, uniform(-0.2, 0.2), {}}, {c, uniform(-0.2, 0.2), {}}},
        [](const std::vector<Tensor>& in, DType) {
          return std::vector<Tensor>{batch_norm_input_grad(in[0], in[1], in[2], in[3], in[4], in[5], in[6])};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected e(s);
          for (std::int64_t r = 0; r < rows_n; ++r)
            for (std::int64_t k = 0; k < cols; ++k) {
              const double g = in[0][at(r, k)], x = in[1][at(r, k)], m = in[2][k], is = in[3][k], sc = in[4][k];
              const double mdy = in[5][k], mdyx = in[6][k];
              const double terms = std::fabs(g) + std::fabs(mdy) + (std::fabs(x) + std::fabs(m)) * is * std::fabs(mdyx);
              e.set(at(r, k), sc * (g - mdy - (x - m) * is * mdyx), 0, 3 * std::fabs(sc) * terms);
            }
          return std::vector<Expected>{e};
        }));
  }

  // LayerNormalization's fused passes, each row's statistics in one kernel: rows shorter than a
  // vector, and rows of whole vectors and a partial one, past the grain.
  for (const Shape& s : {Shape{7, 5}, Shape{4099, 33}}) {
    const std::string variant = s[0] > 100 ? "grain" : "odd";
    const std::int64_t rows_n = s[0], cols = s[1];
    const Shape c{cols}, r{rows_n};
    const auto at = [cols](std::int64_t row, std::int64_t k) { return row * cols + k; };
    constexpr double kEpsilon = 1e-3;
    for (const bool affine : {true, false}) {
      rows.push_back(make_row(
          affine ? "layer_norm" : "layer_norm_no_gamma_beta", variant, "layer_norm", floats(),
          {{KernelOp::kLayerNorm, {}}}, {{s, uniform(-2, 2), {}}, {c, uniform(0.5, 2), {}}, {c, uniform(-1, 1), {}}},
          [affine](const std::vector<Tensor>& in, DType) {
            const auto out = affine ? layer_norm(in[0], in[1], in[2], static_cast<float>(kEpsilon))
                                    : layer_norm(in[0], Tensor(), Tensor(), static_cast<float>(kEpsilon));
            return std::vector<Tensor>{out[0], out[1], out[2]};
          },
          [=](const std::vector<Host>& in, DType) {
            Expected y(s), mean(r), inv_std(r);
            for (std::int64_t row = 0; row < rows_n; ++row) {
              double sum = 0, abs_sum = 0, squares = 0;
              for (std::int64_t k = 0; k < cols; ++k) {
                sum += in[0][at(row, k)];
                abs_sum += std::fabs(in[0][at(row, k)]);
              }
              const double m = sum / static_cast<double>(cols);
              for (std::int64_t k = 0; k < cols; ++k) squares += (in[0][at(row, k)] - m) * (in[0][at(row, k)] - m);
              const double is = 1.0 / std::sqrt(squares / static_cast<double>(cols) + kEpsilon);
              mean.set(row, m, abs_sum / static_cast<double>(cols));
              inv_std.set(row, is, 0, 3 * is);
              for (std::int64_t k = 0; k < cols; ++k) {
                const double x = in[0][at(row, k)], g = affine ? in[1][k] : 1.0, b = affine ? in[2][k] : 0.0;
                y.set(at(row, k), (x - m) * is * g + b, 0,
                      3 * (std::fabs(x) + abs_sum / static_cast<double>(cols)) * is * std::fabs(g) + std::fabs(b));
              }
            }
            return std::vector<Expected>{y, mean, inv_std};
          }));
      rows.push_back(make_row(
          affine ? "layer_norm_input_grad" : "layer_norm_input_grad_no_gamma", variant, "layer_norm_input_grad",
          floats(), {{KernelOp::kLayerNormBackward, {}}},
          {{s, uniform(-1, 1), {}}, {s, uniform(-2, 2), {}}, {c, uniform(0.5, 2), {}}, {r, uniform(-0.5, 0.5), {}},
           {r, uniform(0.5, 2), {}}},
          [affine](const std::vector<Tensor>& in, DType) {
            return std::vector<Tensor>{layer_norm_input_grad(in[0], in[1], affine ? in[2] : Tensor(), in[3], in[4])};
          },
          [=](const std::vector<Host>& in, DType) {
            Expected e(s);
            for (std::int64_t row = 0; row < rows_n; ++row) {
              const double m = in[3][row], is = in[4][row];
              double sh = 0, shx = 0, abs_h = 0, abs_hx = 0;
              for (std::int64_t k = 0; k < cols; ++k) {
                const double h = in[0][at(row, k)] * (affine ? in[2][k] : 1.0), xhat = (in[1][at(row, k)] - m) * is;
                sh += h;
                shx += h * xhat;
                abs_h += std::fabs(h);
                abs_hx += std::fabs(h * xhat);
              }
              const double mh = sh / static_cast<double>(cols), mhx = shx / static_cast<double>(cols);
              for (std::int64_t k = 0; k < cols; ++k) {
                const double h = in[0][at(row, k)] * (affine ? in[2][k] : 1.0), xhat = (in[1][at(row, k)] - m) * is;
                const double terms = std::fabs(h) + abs_h / static_cast<double>(cols) +
                                     (std::fabs(in[1][at(row, k)]) + std::fabs(m)) * is * abs_hx / static_cast<double>(cols);
                e.set(at(row, k), is * (h - mh - xhat * mhx), 0, 3 * is * terms);
              }
            }
            return std::vector<Expected>{e};
          }));
    }
  }

  rows.push_back(make_row(
      "sparse_categorical_matches", "ties", "sparse_categorical_matches", floats(),
      {{KernelOp::kArgmax, {}}, {KernelOp::kCompare, DType::kI64}, {KernelOp::kCast, DType::kU8}},
      {{{9}, labels(4), DType::kI64}, {{9, 4}, coarse(), {}}},
      [](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{sparse_categorical_matches(in[0], in[1])};
      },
      [](const std::vector<Host>& in, DType) {
        Expected e({9});
        for (std::int64_t r = 0; r < 9; ++r) {
          std::int64_t best = 0;
          for (std::int64_t c = 1; c < 4; ++c)
            if (in[1][r * 4 + c] > in[1][r * 4 + best]) best = c;
          e.set(r, best == static_cast<std::int64_t>(in[0][r]) ? 1.0 : 0.0);
        }
        return std::vector<Expected>{e};
      },
      Match::kExact));

  rows.push_back(accuracy_state_row("i64_labels_ties", AccuracyLabels::kInt64, coarse()));
  rows.push_back(accuracy_state_row("f32_labels_nan_rows", AccuracyLabels::kFloat, with_nan(-1, 1, 7)));
  rows.push_back(accuracy_state_row("one_hot_ties", AccuracyLabels::kOneHot, coarse()));

  rows.push_back(dropout_row("grain", {67, 1001}, 0.3f));
  rows.push_back(dropout_row("rank1", {400}, 0.5f));
  for (const bool normal : {false, true}) {
    rows.push_back(random_fill_row(normal, "grain", {67, 1001}));
    rows.push_back(random_fill_row(normal, "rank1", {400}));
    rows.push_back(random_fill_row(normal, "empty", {0, 3}));
  }

  for (const Shape& s : {Shape{67591}, Shape{0, 3}}) {
    rows.push_back(make_row(
        "sum_squares", s.numel() ? "grain" : "empty", "sum_squares", floats(), {{KernelOp::kSumSquares, {}}},
        {{s, uniform(-2, 2), {}}},
        [](const std::vector<Tensor>& in, DType) {
          return std::vector<Tensor>{Tensor::scalar(sum_squares(in[0]), DType::kF32)};
        },
        [](const std::vector<Host>& in, DType) {
          Expected e(Shape{});
          double s2 = 0;
          for (double v : in[0].v) s2 += v * v;
          e.set(0, s2);
          return std::vector<Expected>{e};
        }));
  }


  rows.push_back(scale_and_clip_row("grain", {67591}, uniform(-3, 3), 0.7f, 1.0f));
  rows.push_back(scale_and_clip_row("nonfinite", {16}, specials(), 2.0f, 1.0f));
  rows.push_back(scale_and_clip_row("nonfinite_noclip", {16}, specials(), 0.5f, INFINITY));  // clipnorm alone
  rows.push_back(add_sum_squares_row());
  rows.push_back(clip_by_norms_row());
  rows.push_back(loss_scale_row("finite", uniform(-3, 3)));
  rows.push_back(loss_scale_row("nonfinite", specials()));
  rows.push_back(loss_seed_row("host_factor", false, 1.0f));
  rows.push_back(loss_seed_row("block_factor", true, 1.0f));
  rows.push_back(loss_seed_row("host_factor_weighted", false, 0.375f));
  rows.push_back(loss_seed_row("block_factor_weighted", true, 0.375f));

  rows.push_back(sgd_row("sgd_update", false, false));
  rows.push_back(sgd_row("sgd_update_momentum", true, false));
  rows.push_back(sgd_row("sgd_update_nesterov", true, true));
  rows.push_back(adam_row("adam_update", 0.0f));
  rows.push_back(adam_row("adamw_update", 1e-4f));
  rows.push_back(rmsprop_row("rmsprop_update", false, 0.0f));
  rows.push_back(rmsprop_row("rmsprop_update_centered_momentum", true, 0.9f));
  rows.push_back(rmsprop_row("rmsprop_update_momentum", false, 0.5f));
  // The sharded update of replicas that share memory: 2 and 3 replicas' gradients.
  rows.push_back(sgd_row("sgd_update_summed", false, false, 2));
  rows.push_back(sgd_row("sgd_update_summed_nesterov", true, true, 3));
  rows.push_back(adam_row("adam_update_summed", 0.0f, 2));
  rows.push_back(adam_row("adamw_update_summed", 1e-4f, 3));
  // Several variables in one launch (multi-tensor apply): the variable cut in three.
  rows.push_back(sgd_row("sgd_update_multi", false, false, 0, true));
  rows.push_back(sgd_row("sgd_update_multi_nesterov", true, true, 0, true));
  rows.push_back(adam_row("adamw_update_multi", 1e-4f, 0, true));
  rows.push_back(rmsprop_row("rmsprop_update_multi", false, 0.0f, true));
  rows.push_back(rmsprop_row("rmsprop_update_multi_centered_momentum", true, 0.9f, true));
  rows.push_back(step_row());
  // One LSTM step (Keras' gates i, f, c, o) and its backward. "rows": past the CPU's row grain.
  // The forward stores each intermediate as the dtype (the composed ops' bits), so a 16-bit
  // result carries a few roundings of values of size ~1 (mag 2).
  for (const auto& [variant, batch, units] :
       {std::tuple<const char*, std::int64_t, std::int64_t>{"small", 3, 5}, {"rows", 33, 16}}) {
    const Shape z{batch, 4 * units}, st{batch, units}, halves{2, batch, units};
    const auto at = [units](std::int64_t r, std::int64_t gate, std::int64_t j) { return (r * 4 + gate) * units + j; };
    const auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
    rows.push_back(make_row(
        "lstm_cell", variant, "lstm_cell", floats(), {{KernelOp::kLstmCell, {}}},
        {{z, uniform(-4, 4), {}}, {z, uniform(-2, 2), {}}, {st, uniform(-2, 2), {}}},
        [](const std::vector<Tensor>& in, DType) {
          const auto out = lstm_cell_step(in[0], in[1], in[2]);
          return std::vector<Tensor>{out[0], out[1]};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected hc(halves), gates(z);
          for (std::int64_t r = 0; r < batch; ++r)
            for (std::int64_t j = 0; j < units; ++j) {
              const auto zv = [&](std::int64_t g) { return in[0][at(r, g, j)] + in[1][at(r, g, j)]; };
              const double i = sig(zv(0)), f = sig(zv(1)), g = std::tanh(zv(2)), o = sig(zv(3));
              const double cp = in[2][r * units + j], c = f * cp + i * g;
              hc.set(r * units + j, o * std::tanh(c), 0, 2);
              hc.set((batch + r) * units + j, c, 0, 2 + std::fabs(cp));
              for (const auto& [gate, v] : {std::pair{0, i}, {1, f}, {2, g}, {3, o}}) gates.set(at(r, gate, j), v, 0, 1);
            }
          return std::vector<Expected>{hc, gates};
        }));
    rows.push_back(make_row(
        "lstm_cell_grad", variant, "lstm_cell_grad", floats(), {{KernelOp::kLstmCellBackward, {}}},
        {{halves, uniform(-1, 1), {}}, {z, uniform(0, 1), {}}, {st, uniform(-2, 2), {}}, {halves, uniform(-2, 2), {}}},
        [](const std::vector<Tensor>& in, DType) {
          const auto out = lstm_cell_grad(in[0], in[1], in[2], in[3]);
          return std::vector<Tensor>{out[0], out[1]};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected dz(z), dc_prev(st);
          for (std::int64_t r = 0; r < batch; ++r)
            for (std::int64_t j = 0; j < units; ++j) {
              const std::int64_t k = r * units + j;
              const double i = in[1][at(r, 0, j)], f = in[1][at(r, 1, j)], g = in[1][at(r, 2, j)],
                           o = in[1][at(r, 3, j)];
              const double dh = in[0][k], t = std::tanh(in[3][batch * units + k]);
              const double dct = in[0][batch * units + k] + dh * o * (1 - t * t), mag = std::fabs(in[0][batch * units + k]) + std::fabs(dh);
              dz.set(at(r, 0, j), dct * g * i * (1 - i), 0, mag);
              dz.set(at(r, 1, j), dct * in[2][k] * f * (1 - f), 0, 2 * mag);
              dz.set(at(r, 2, j), dct * i * (1 - g * g), 0, mag);
              dz.set(at(r, 3, j), dh * t * o * (1 - o), 0, mag);
              dc_prev.set(k, dct * f, 0, mag);
            }
          return std::vector<Expected>{dz, dc_prev};
        }));
    // The GRU step (reset_after=True: x and inner are [batch, 3 units]) and its backward.
    const Shape z3{batch, 3 * units};
    const auto at3 = [units](std::int64_t r, std::int64_t gate, std::int64_t j) { return (r * 3 + gate) * units + j; };
    rows.push_back(make_row(
        "gru_cell", variant, "gru_cell", floats(), {{KernelOp::kGruCell, {}}},
        {{z3, uniform(-4, 4), {}}, {z3, uniform(-2, 2), {}}, {st, uniform(-1, 1), {}}},
        [](const std::vector<Tensor>& in, DType) {
          const auto out = gru_cell_step(in[0], in[1], in[2]);
          return std::vector<Tensor>{out[0], out[1]};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected h(st), gates(z3);
          for (std::int64_t r = 0; r < batch; ++r)
            for (std::int64_t j = 0; j < units; ++j) {
              const double zg = sig(in[0][at3(r, 0, j)] + in[1][at3(r, 0, j)]);
              const double rg = sig(in[0][at3(r, 1, j)] + in[1][at3(r, 1, j)]);
              const double hh = std::tanh(in[0][at3(r, 2, j)] + rg * in[1][at3(r, 2, j)]);
              h.set(r * units + j, zg * in[2][r * units + j] + (1 - zg) * hh, 0, 2);
              for (const auto& [gate, v] : {std::pair{0, zg}, {1, rg}, {2, hh}}) gates.set(at3(r, gate, j), v, 0, 1);
            }
          return std::vector<Expected>{h, gates};
        }));
    rows.push_back(make_row(
        "gru_cell_grad", variant, "gru_cell_grad", floats(), {{KernelOp::kGruCellBackward, {}}},
        {{st, uniform(-1, 1), {}}, {z3, uniform(0, 1), {}}, {z3, uniform(-2, 2), {}}, {st, uniform(-1, 1), {}}},
        [](const std::vector<Tensor>& in, DType) {
          const auto out = gru_cell_grad(in[0], in[1], in[2], in[3]);
          return std::vector<Tensor>{out[0], out[1], out[2]};
        },
        [=](const std::vector<Host>& in, DType) {
          Expected dx(z3), dinner(z3), dh_prev(st);
          for (std::int64_t r = 0; r < batch; ++r)
            for (std::int64_t j = 0; j < units; ++j) {
              const std::int64_t k = r * units + j;
              const double zg = in[1][at3(r, 0, j)], rg = in[1][at3(r, 1, j)], hh = in[1][at3(r, 2, j)];
              const double d = in[0][k], mag = 2 * std::fabs(d);
              const double dpre = d * (1 - zg) * (1 - hh * hh), dz = d * (in[3][k] - hh) * zg * (1 - zg);
              const double dr = dpre * in[2][at3(r, 2, j)] * rg * (1 - rg);
              for (Expected* e : {&dx, &dinner}) {
                e->set(at3(r, 0, j), dz, 0, mag * (1 + std::fabs(in[3][k])));
                e->set(at3(r, 1, j), dr, 0, 2 * mag);
              }
              dx.set(at3(r, 2, j), dpre, 0, mag);
              dinner.set(at3(r, 2, j), dpre * rg, 0, mag);
              dh_prev.set(k, d * zg, 0, mag);
            }
          return std::vector<Expected>{dx, dinner, dh_prev};
        }));
  }

  return rows;
}

}  // namespace lockstep::parity
