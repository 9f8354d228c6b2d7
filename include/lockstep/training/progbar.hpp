#pragma once
// Keras' progress bar:
//   1000/1000 [==============================] - 3s 3ms/step - loss: 0.2210 - accuracy: 0.9345
// redrawn in place on a terminal or in Jupyter; one line per epoch otherwise.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "lockstep/training/callback.hpp"

namespace lockstep {

/// Whether stdout redraws a line in place (Keras' "dynamic display"): a terminal, or a front end
/// that renders carriage returns although stdout is a pipe, as Jupyter does; the Python package
/// calls set_stdout_redraws(true) in a Jupyter kernel. Decides verbose="auto" (1 or 2) too.
bool stdout_redraws();
void set_stdout_redraws(bool redraws);

class Progbar {
 public:
  /// target: total steps, or -1 when unknown. interactive: redraw in place (default: for stdout
  /// stdout_redraws(), for another file isatty).
  explicit Progbar(std::int64_t target, std::FILE* out = stdout, int interactive = -1, int width = 30);
  /// Shows progress at `current` steps with the given (name, value) pairs.
  void update(std::int64_t current, const std::vector<std::pair<std::string, double>>& values, bool finalize = false);
  /// Whether update(current, ..., finalize) would print now: a caller skips making the values
  /// of a line that is not drawn (fit calls it every batch; an interactive bar redraws at most
  /// every 50 ms, another prints only its final line).
  bool draws(std::int64_t current, bool finalize = false) const;
  /// The line update() would print (no trailing newline, no carriage return).
  std::string render(std::int64_t current, const std::vector<std::pair<std::string, double>>& values,
                     double elapsed_seconds) const;

 private:
  std::int64_t target_;
  std::FILE* out_;
  bool interactive_;
  int width_;
  std::size_t drawn_ = 0;  // the length of the line last drawn in place
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

/// The callback that prints "Epoch i/N" and a Progbar per epoch (verbose 1), or one line per
/// epoch (verbose 2).
class ProgbarLogger final : public Callback {
 public:
  explicit ProgbarLogger(std::FILE* out = stdout) : out_(out) {}
  void on_epoch_begin(int epoch, const Logs&) override;
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool async_safe() const override { return true; }  // draws the logs it is given

 private:
  std::FILE* out_;
  std::unique_ptr<Progbar> bar_;
  std::int64_t seen_ = 0;
};

}  // namespace lockstep
