#pragma once
// Keras' callback hooks. `Logs` maps names ("loss", "accuracy", "val_loss", ...) to values.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

class Model;
using Logs = std::map<std::string, double>;

/// What fit() tells callbacks before training starts (Keras' `params`).
struct TrainParams {
  int epochs = 1;
  std::int64_t steps = -1;  // steps per epoch; -1 when unknown
  int verbose = 1;
};

class Callback {
 public:
  virtual ~Callback() = default;
  /// Called once by fit/evaluate/predict before any other hook.
  virtual void set_model(Model* model) { model_ = model; }
  virtual void set_params(const TrainParams& params) { params_ = params; }
  virtual void on_train_begin(const Logs&) {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int /*epoch*/, const Logs&) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs&) {}
  virtual void on_train_batch_begin(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_train_batch_end(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_test_begin(const Logs&) {}
  virtual void on_test_end(const Logs&) {}
  virtual void on_test_batch_begin(std::int64_t, const Logs&) {}
  virtual void on_test_batch_end(std::int64_t, const Logs&) {}
  virtual void on_predict_begin(const Logs&) {}
  virtual void on_predict_end(const Logs&) {}
  virtual void on_predict_batch_begin(std::int64_t, const Logs&) {}
  virtual void on_predict_batch_end(std::int64_t, const Logs&) {}
  /// Keras' async_safe: whether on_train_batch_end may run after later steps were already
  /// queued. It is still called once per execution, in order, with that execution's own logs;
  /// what it reads of the model (weights, metrics, iterations) may be some steps further on, and
  /// a stop_training it sets takes effect at fit's next read (up to 15 steps later; no callback
  /// is then shown a later batch).
  /// on_train_batch_begin is still called before its steps are queued (so it may come before an
  /// earlier batch's end). When every callback of a fit is async-safe, fit reads the steps'
  /// numbers once per several steps, not at every execution's end (a wait for the devices each).
  /// false (the default, as Keras'): each execution's batch end is called before the next is queued.
  virtual bool async_safe() const { return false; }

 protected:
  /// Whether this process writes a callback's files: `is_chief` when given (as the CLI gives
  /// it), else Keras' own rule: the chief of the model's strategy (worker 0 of a
  /// MultiWorkerMirroredStrategy; the one process otherwise).
  bool writes_files(const std::optional<bool>& is_chief) const;
  Model* model_ = nullptr;
  TrainParams params_;
};
using CallbackPtr = std::shared_ptr<Callback>;

/// Per-epoch logs of a fit() run, as keras.callbacks.History.
struct History {
  std::vector<int> epoch;
  std::map<std::string, std::vector<double>> history;
};

}  // namespace lockstep
