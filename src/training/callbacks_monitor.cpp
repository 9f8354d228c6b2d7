// Callbacks that watch a logged quantity: EarlyStopping, ReduceLROnPlateau, TerminateOnNaN,
// and LearningRateScheduler.
#include <cmath>
#include <cstdio>
#include <limits>

#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/model.hpp"
#include "training/monitor_mode.hpp"

namespace lockstep {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

void warn_missing(const char* who, const std::string& monitor, const Logs& logs) {
  std::string keys;
  for (const auto& [k, v] : logs) keys += (keys.empty() ? "" : ", ") + k;
  std::fprintf(stderr, "WARNING: %s conditioned on metric '%s' which is not available. Available metrics are: %s\n",
               who, monitor.c_str(), keys.c_str());
}

optimizers::Optimizer& optimizer_of(Model* model, const char* who) {
  LOCKSTEP_CHECK(model != nullptr && model->optimizer(), who, ": the model must be compiled with an optimizer");
  return *model->optimizer();
}
}  // namespace

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : o_(std::move(options)), greater_(detail::monitor_greater_is_better(o_.mode, o_.monitor, "EarlyStopping")) {
  LOCKSTEP_CHECK(o_.patience >= 0, "EarlyStopping: patience must be >= 0, got ", o_.patience);
  // Keras: min_delta is a magnitude whose sign follows the direction of improvement.
  o_.min_delta = std::fabs(o_.min_delta) * (greater_ ? 1.0 : -1.0);
}

bool EarlyStopping::is_improvement(double value, double reference) const {
  return greater_ ? value - o_.min_delta > reference : value - o_.min_delta < reference;
}

void EarlyStopping::on_train_begin(const Logs&) {
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_ = greater_ ? -kInf : kInf;
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  const auto it = logs.find(o_.monitor);
  if (it == logs.end()) {
    warn_missing("Early stopping", o_.monitor, logs);
    return;
  }
  if (epoch < o_.start_from_epoch) return;
  const double current = it->second;
  const auto snapshot = [&] {
    best_weights_.clear();
    for (const auto& v : model_->variables()) best_weights_.push_back(v.value().clone());
  };
  if (o_.restore_best_weights && best_weights_.empty()) snapshot();
  ++wait_;
  if (is_improvement(current, best_)) {
    best_ = current;
    best_epoch_ = epoch;
    if (o_.restore_best_weights) snapshot();
    // Only restart the wait when both the previous best and the baseline are beaten.
    if (!o_.baseline || is_improvement(current, *o_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= o_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model_->stop_training = true;
    if (o_.restore_best_weights && !best_weights_.empty()) {
      if (o_.verbose > 0) std::printf("Restoring model weights from the end of the best epoch: %d.\n", best_epoch_ + 1);
      auto vars = model_->variables();
      for (std::size_t i = 0; i < vars.size() && i < best_weights_.size(); ++i) vars[i].assign(best_weights_[i]);
    }
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  if (stopped_epoch_ > 0 && o_.verbose > 0) std::printf("Epoch %d: early stopping\n", stopped_epoch_ + 1);
}

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options)
    : o_(std::move(options)), greater_(detail::monitor_greater_is_better(o_.mode, o_.monitor, "ReduceLROnPlateau")) {
  LOCKSTEP_CHECK(o_.factor < 1.0 && o_.factor > 0.0, "ReduceLROnPlateau does not support a factor >= 1.0 or <= 0, got ",
                 o_.factor);
}

void ReduceLROnPlateau::on_train_begin(const Logs&) {
  best_ = greater_ ? -kInf : kInf;
  wait_ = 0;
  cooldown_counter_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(int epoch, const Logs& logs) {
  const auto it = logs.find(o_.monitor);
  if (it == logs.end()) {
    warn_missing("Learning rate reduction", o_.monitor, logs);
    return;
  }
  const double current = it->second;
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  const bool better = greater_ ? current > best_ + o_.min_delta : current < best_ - o_.min_delta;
  if (better) {
    best_ = current;
    wait_ = 0;
  } else if (cooldown_counter_ <= 0 && ++wait_ >= o_.patience) {
    auto& opt = optimizer_of(model_, "ReduceLROnPlateau");
    const double old_lr = opt.current_learning_rate();
    // Keras compares in float32, so a rate already at min_lr is not "reduced" again.
    if (static_cast<float>(old_lr) > static_cast<float>(o_.min_lr)) {
      const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
      opt.set_learning_rate(new_lr);
      if (o_.verbose > 0)
        std::printf("\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", epoch + 1, new_lr);
      cooldown_counter_ = o_.cooldown;
      wait_ = 0;
    }
  }
}

LearningRateScheduler::LearningRateScheduler(Schedule schedule, int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  LOCKSTEP_CHECK(static_cast<bool>(schedule_), "LearningRateScheduler: the schedule function is empty");
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  auto& opt = optimizer_of(model_, "LearningRateScheduler");
  const double lr = schedule_(epoch, opt.current_learning_rate());
  LOCKSTEP_CHECK(std::isfinite(lr), "LearningRateScheduler: the schedule returned ", lr, " for epoch ", epoch);
  opt.set_learning_rate(lr);
  if (verbose_ > 0) std::printf("\nEpoch %d: LearningRateScheduler setting learning rate to %g.\n", epoch + 1, lr);
}

void TerminateOnNaN::on_epoch_begin(int epoch, const Logs&) { epoch_ = epoch; }

void TerminateOnNaN::on_train_batch_end(std::int64_t batch, const Logs& logs) {
  const auto it = logs.find("loss");
  if (it != logs.end() && !std::isfinite(it->second)) {
    std::printf("Batch %lld: Invalid loss, terminating training\n", static_cast<long long>(batch));
    model_->stop_training = true;
    terminated_ = true;
    batch_ = batch;
  }
}

}  // namespace lockstep
