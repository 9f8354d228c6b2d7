#include "lockstep/training/progbar.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <string_view>

#include "training/progbar_values.hpp"

namespace lockstep {

namespace {
std::string format_value(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e-3 || v == 0.0) std::snprintf(buf, sizeof buf, "%.4f", v);
  else std::snprintf(buf, sizeof buf, "%.4e", v);
  return buf;
}

// The bar shows what Keras' shows, losses and compiled metrics (and their val_ ones), and the input
// share its own way ("input: 4%"). Epoch-log keys of lockstep's own are for History, CSVLogger and
// TensorBoard, not the bar: it shows time per step, not steps_per_second.
bool is_logs_only_key(const std::string& k) {
  static constexpr std::array<std::string_view, 6> kLogsOnly = {
      "input_wait_share", "steps_per_second", "peak_memory_mib", "gpu_utilization", "loss_scale", "skipped_steps"};
  return std::find(kLogsOnly.begin(), kLogsOnly.end(), k) != kLogsOnly.end();
}

}  // namespace

std::vector<std::pair<std::string, double>> detail::progbar_values(const Logs& logs) {
  std::vector<std::pair<std::string, double>> vals;
  auto it = logs.find("loss");
  if (it != logs.end()) vals.emplace_back(*it);
  for (const auto& kv : logs)
    if (kv.first != "loss" && kv.first.rfind("val_", 0) != 0 && !is_logs_only_key(kv.first)) vals.emplace_back(kv);
  for (const auto& kv : logs)
    if (kv.first.rfind("val_", 0) == 0) vals.emplace_back(kv);
  it = logs.find("input_wait_share");
  if (it != logs.end()) vals.emplace_back("input", it->second);
  return vals;
}

namespace {
std::string format_time(double seconds) {
  char buf[32];
  if (seconds >= 1.0) std::snprintf(buf, sizeof buf, "%.0fs", seconds);
  else if (seconds >= 1e-3) std::snprintf(buf, sizeof buf, "%.0fms", seconds * 1e3);
  else std::snprintf(buf, sizeof buf, "%.0fus", seconds * 1e6);
  return buf;
}

std::atomic<bool> stdout_redraws_override{false};
}  // namespace

bool stdout_redraws() { return stdout_redraws_override.load() || isatty(fileno(stdout)) != 0; }

void set_stdout_redraws(bool redraws) { stdout_redraws_override.store(redraws); }

Progbar::Progbar(std::int64_t target, std::FILE* out, int interactive, int width)
    : target_(target),
      out_(out),
      interactive_(interactive >= 0 ? interactive != 0 : out == stdout ? stdout_redraws() : isatty(fileno(out)) != 0),
      width_(width),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string Progbar::render(std::int64_t current, const std::vector<std::pair<std::string, double>>& values,
                            double elapsed) const {
  std::string line;
  if (target_ > 0) {
    const std::string t = std::to_string(target_);
    std::string c = std::to_string(current);
    if (c.size() < t.size()) c.insert(0, t.size() - c.size(), ' ');
    line = c + "/" + t + " [";
    const double frac = std::min(1.0, static_cast<double>(current) / static_cast<double>(target_));
    const int filled = static_cast<int>(frac * width_);
    if (filled > 0) {
      line.append(static_cast<std::size_t>(filled - 1), '=');
      line += current < target_ ? '>' : '=';
    }
    line.append(static_cast<std::size_t>(width_ - filled), '.');
    line += "]";
  } else {
    line = std::to_string(current) + "/Unknown";
  }
  const double per_step = current > 0 ? elapsed / static_cast<double>(current) : 0.0;
  if (target_ > 0 && current < target_) {
    line += " - ETA: " + format_time(per_step * static_cast<double>(target_ - current));
  } else {
    line += " - " + format_time(elapsed) + " " + format_time(per_step) + "/step";
  }
  for (const auto& [name, v] : values) {
    if (name == "input") {  // the share of the time spent waiting for input
      char buf[32];
      std::snprintf(buf, sizeof buf, " - input: %.0f%%", 100.0 * v);
      line += buf;
    } else {
      line += " - " + name + ": " + format_value(v);
    }
  }
  return line;
}

bool Progbar::draws(std::int64_t current, bool finalize) const {
  if (finalize || (target_ > 0 && current >= target_)) return true;
  // Redraw at most every 50 ms, and always at the end.
  return interactive_ && std::chrono::duration<double>(std::chrono::steady_clock::now() - last_draw_).count() >= 0.05;
}

void Progbar::update(std::int64_t current, const std::vector<std::pair<std::string, double>>& values, bool finalize) {
  if (!draws(current, finalize)) return;
  const auto now = std::chrono::steady_clock::now();
  const bool done = finalize || (target_ > 0 && current >= target_);
  if (interactive_) {
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    // Spaces, not an erase-line escape, clear what a longer previous line left: Jupyter renders
    // "\r" as overwriting the line character by character and drops unknown escapes.
    std::string line = render(current, values, elapsed);
    const std::size_t width = line.size();
    if (width < drawn_) line.append(drawn_ - width, ' ');
    drawn_ = done ? 0 : width;
    std::fprintf(out_, "\r%s%s", line.c_str(), done ? "\n" : "");
    std::fflush(out_);
  } else {  // the final line (draws)
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::fprintf(out_, "%s\n", render(current, values, elapsed).c_str());
    std::fflush(out_);
  }
}

void ProgbarLogger::on_epoch_begin(int epoch, const Logs&) {
  if (params_.verbose <= 0) return;
  std::fprintf(out_, "Epoch %d/%d\n", epoch + 1, params_.epochs);
  std::fflush(out_);
  bar_ = std::make_unique<Progbar>(params_.steps, out_, params_.verbose == 1 ? -1 : 0);
  seen_ = 0;
}

void ProgbarLogger::on_train_batch_end(std::int64_t batch, const Logs& logs) {
  seen_ = batch + 1;
  if (!bar_ || params_.verbose != 1) return;
  if (params_.steps > 0 && seen_ >= params_.steps) return;  // the epoch's end draws the final line
  if (bar_->draws(seen_)) bar_->update(seen_, detail::progbar_values(logs));  // no values made for nothing
}

void ProgbarLogger::on_epoch_end(int, const Logs& logs) {
  if (!bar_) return;
  bar_->update(seen_, detail::progbar_values(logs), true);
  bar_.reset();
}

}  // namespace lockstep
