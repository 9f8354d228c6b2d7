#include "lockstep/optimizers/schedules.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "lockstep/core/error.hpp"
#include "nn/config_reader.hpp"
#include "nn/schedule_desc.hpp"

namespace lockstep::optimizers::schedules {

namespace {
// A rate that is infinite, NaN or negative trains to NaN, silently: refused where it is given.
void check_rate(double v, const char* schedule, const char* what) {
  LOCKSTEP_CHECK(std::isfinite(v) && v >= 0, schedule, ": ", what, " must be a finite number >= 0, got ", v);
}
void check_steps(std::int64_t v, const char* schedule, const char* what) {
  LOCKSTEP_CHECK(v > 0, schedule, ": ", what, " must be > 0, got ", v);
}
}  // namespace

namespace {
namespace sm = schedule_math;
// A schedule Keras has a class for is its description, the one copy of Keras' arguments: the
// callable evaluates it (schedule_math, the math written once for the host and the device), and
// serialize() and describe() find it again (Schedule::target).
struct Described {
  sm::ScheduleDesc d;
  double operator()(std::int64_t step) const { return sm::schedule_rate(d, step); }
};

// What no description holds: a PiecewiseConstantDecay of more boundaries than a description has
// room for, and a LinearWarmup around a schedule that has no description or a warmup already.
struct LongPiecewise {
  std::vector<std::int64_t> boundaries;
  std::vector<double> values;
  double operator()(std::int64_t step) const {
    return sm::piecewise(boundaries.data(), values.data(), static_cast<int>(boundaries.size()), step);
  }
};

struct Warmup {
  Schedule after;
  std::int64_t warmup_steps;
  double initial;
  double target;  // after(0)
  double operator()(std::int64_t step) const {
    if (step >= warmup_steps) return after(step - warmup_steps);
    return sm::warmup_ramp(initial, target, warmup_steps, step);
  }
};

Schedule described(sm::ScheduleKind kind, double initial, std::int64_t decay_steps = 1) {
  sm::ScheduleDesc d;
  d.kind = kind;
  d.initial = initial;
  d.decay_steps = decay_steps;
  return Described{d};
}
sm::ScheduleDesc& desc_of(Schedule& s) { return s.target<Described>()->d; }
}  // namespace

Schedule ExponentialDecay(double initial, std::int64_t decay_steps, double decay_rate, bool staircase) {
  check_rate(initial, "ExponentialDecay", "initial_learning_rate");
  check_steps(decay_steps, "ExponentialDecay", "decay_steps");
  check_rate(decay_rate, "ExponentialDecay", "decay_rate");
  Schedule s = described(sm::ScheduleKind::kExponential, initial, decay_steps);
  desc_of(s).decay_rate = decay_rate;
  desc_of(s).staircase = staircase;
  return s;
}

Schedule PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values) {
  LOCKSTEP_CHECK(values.size() == boundaries.size() + 1, "PiecewiseConstantDecay: needs one more value than boundaries, got ",
                 boundaries.size(), " boundaries and ", values.size(), " values");
  for (std::size_t i = 1; i < boundaries.size(); ++i)
    LOCKSTEP_CHECK(boundaries[i] > boundaries[i - 1], "PiecewiseConstantDecay: boundaries must increase, got ",
                   boundaries[i - 1], " then ", boundaries[i]);
  for (double v : values) check_rate(v, "PiecewiseConstantDecay", "every value");
  if (boundaries.size() > static_cast<std::size_t>(sm::kMaxPiecewiseBoundaries))
    return LongPiecewise{std::move(boundaries), std::move(values)};
  Schedule s = described(sm::ScheduleKind::kPiecewise, 0);
  sm::ScheduleDesc& d = desc_of(s);
  d.n_boundaries = static_cast<int>(boundaries.size());
  std::copy(boundaries.begin(), boundaries.end(), d.boundaries);
  std::copy(values.begin(), values.end(), d.values);
  return s;
}

Schedule CosineDecay(double initial, std::int64_t decay_steps, const CosineDecayOptions& o) {
  check_rate(initial, "CosineDecay", "initial_learning_rate");
  check_steps(decay_steps, "CosineDecay", "decay_steps");
  LOCKSTEP_CHECK(std::isfinite(o.alpha) && o.alpha >= 0 && o.alpha <= 1, "CosineDecay: alpha must be in [0, 1], got ",
                 o.alpha);
  LOCKSTEP_CHECK(o.warmup_steps >= 0, "CosineDecay: warmup_steps must be >= 0, got ", o.warmup_steps);
  if (o.warmup_target) check_rate(*o.warmup_target, "CosineDecay", "warmup_target");
  Schedule s = described(sm::ScheduleKind::kCosine, initial, decay_steps);
  sm::ScheduleDesc& d = desc_of(s);
  d.alpha = o.alpha;
  d.has_warmup_target = o.warmup_target.has_value();
  d.warmup_target = o.warmup_target.value_or(0.0);
  d.warmup_steps = o.warmup_steps;
  return s;
}

Schedule PolynomialDecay(double initial, std::int64_t decay_steps, double end, double power, bool cycle) {
  check_rate(initial, "PolynomialDecay", "initial_learning_rate");
  check_steps(decay_steps, "PolynomialDecay", "decay_steps");
  check_rate(end, "PolynomialDecay", "end_learning_rate");
  LOCKSTEP_CHECK(std::isfinite(power) && power > 0, "PolynomialDecay: power must be a finite number > 0, got ", power);
  Schedule s = described(sm::ScheduleKind::kPolynomial, initial, decay_steps);
  sm::ScheduleDesc& d = desc_of(s);
  d.end = end;
  d.power = power;
  d.cycle = cycle;
  return s;
}

Schedule LinearWarmup(Schedule after, std::int64_t warmup_steps, double initial) {
  LOCKSTEP_CHECK(static_cast<bool>(after), "LinearWarmup: the schedule to warm up into is empty");
  LOCKSTEP_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  check_rate(initial, "LinearWarmup", "initial_learning_rate");
  const double target = after(0);
  const Described* inner = after.target<Described>();
  if (inner == nullptr || inner->d.linear_warmup) return Warmup{std::move(after), warmup_steps, initial, target};
  Described warmed = *inner;  // one warmup per description
  warmed.d.linear_warmup = true;
  warmed.d.linear_warmup_steps = warmup_steps;
  warmed.d.linear_warmup_initial = initial;
  warmed.d.linear_warmup_target = target;
  return warmed;
}

Schedule Constant(double learning_rate) {
  check_rate(learning_rate, "Constant", "learning_rate");
  return described(sm::ScheduleKind::kConstant, learning_rate);
}

namespace {
using nlohmann::json;

json keras_schedule(const char* cls, json config) {
  return {{"module", "keras.optimizers.schedules"}, {"class_name", cls}, {"config", std::move(config)},
          {"registered_name", nullptr}};
}
}  // namespace

json serialize(const Schedule& s) {
  if (const auto* p = s.target<LongPiecewise>())
    return keras_schedule("PiecewiseConstantDecay",
                          {{"boundaries", p->boundaries}, {"values", p->values}, {"name", "PiecewiseConstant"}});
  const auto* described = s.target<Described>();
  if (described == nullptr || described->d.linear_warmup) return nullptr;  // Keras has no LinearWarmup
  const sm::ScheduleDesc& d = described->d;
  switch (d.kind) {
    case sm::ScheduleKind::kExponential:
      return keras_schedule("ExponentialDecay", {{"initial_learning_rate", d.initial},
                                                 {"decay_steps", d.decay_steps},
                                                 {"decay_rate", d.decay_rate},
                                                 {"staircase", d.staircase},
                                                 {"name", "ExponentialDecay"}});
    case sm::ScheduleKind::kPiecewise:
      return keras_schedule("PiecewiseConstantDecay",
                            {{"boundaries", std::vector<std::int64_t>(d.boundaries, d.boundaries + d.n_boundaries)},
                             {"values", std::vector<double>(d.values, d.values + d.n_boundaries + 1)},
                             {"name", "PiecewiseConstant"}});
    case sm::ScheduleKind::kCosine:
      return keras_schedule("CosineDecay", {{"initial_learning_rate", d.initial},
                                            {"decay_steps", d.decay_steps},
                                            {"alpha", d.alpha},
                                            {"name", "CosineDecay"},
                                            {"warmup_target", d.has_warmup_target ? json(d.warmup_target) : json()},
                                            {"warmup_steps", d.warmup_steps}});
    case sm::ScheduleKind::kPolynomial:
      return keras_schedule("PolynomialDecay", {{"initial_learning_rate", d.initial},
                                                {"decay_steps", d.decay_steps},
                                                {"end_learning_rate", d.end},
                                                {"power", d.power},
                                                {"cycle", d.cycle},
                                                {"name", "PolynomialDecay"}});
    case sm::ScheduleKind::kConstant: break;  // Keras has no Constant
  }
  return nullptr;
}

Schedule deserialize(const json& j) {
  LOCKSTEP_CHECK(j.is_object() && j.contains("class_name") && j.at("class_name").is_string(),
                 "a learning-rate schedule must be {\"class_name\", \"config\"}, got ", j.dump().substr(0, 120));
  const std::string cls = j.at("class_name").get<std::string>();
  const json& c = j.contains("config") ? j.at("config") : json::object();
  detail::ConfigReader r("learning-rate schedule " + cls, c);
  r.pass_over({"name"});
  const auto done = [&r](Schedule s) {
    r.refuse_the_rest();
    return s;
  };
  if (cls == "ExponentialDecay") {
    return done(ExponentialDecay(r.number("initial_learning_rate"), r.integer("decay_steps"), r.number("decay_rate"),
                                 r.boolean("staircase", false)));
  }
  if (cls == "PiecewiseConstantDecay") return done(PiecewiseConstantDecay(r.integers("boundaries"), r.numbers("values")));
  if (cls == "CosineDecay") {
    CosineDecayOptions o{.alpha = r.number("alpha", 0.0), .warmup_steps = r.integer("warmup_steps", 0)};
    o.warmup_target = r.optional_number("warmup_target");
    return done(CosineDecay(r.number("initial_learning_rate"), r.integer("decay_steps"), o));
  }
  if (cls == "PolynomialDecay") {
    return done(PolynomialDecay(r.number("initial_learning_rate"), r.integer("decay_steps"),
                                r.number("end_learning_rate", 0.0001), r.number("power", 1.0), r.boolean("cycle", false)));
  }
  throw ValueError("learning-rate schedule " + cls +
                   " is not supported (lockstep has ExponentialDecay, PiecewiseConstantDecay, CosineDecay, "
                   "PolynomialDecay)");
}

std::optional<schedule_math::ScheduleDesc> describe(const Schedule& s) {
  if (const auto* described = s.target<Described>()) return described->d;
  return std::nullopt;
}

const char* capture_refusal(const Schedule& schedule) {
  if (!schedule || describe(schedule)) return nullptr;
  return "a learning-rate schedule given as a function (or a PiecewiseConstantDecay of more than 32 boundaries, "
         "or a LinearWarmup around a LinearWarmup), which only the host can evaluate";
}

double scaled_learning_rate(double base_lr, std::int64_t base_batch, std::int64_t global_batch) {
  check_rate(base_lr, "scaled_learning_rate", "base_lr");
  LOCKSTEP_CHECK(base_batch > 0 && global_batch > 0, "scaled_learning_rate: batch sizes must be > 0, got base_batch ",
                 base_batch, " and global_batch ", global_batch);
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

}  // namespace lockstep::optimizers::schedules
