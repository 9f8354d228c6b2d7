// Callbacks that log: CSVLogger and TensorBoard.
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/filepath_format.hpp"
#include "lockstep/training/model.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep {

CSVLogger::CSVLogger(CSVLoggerOptions options) : o_(std::move(options)) {
  LOCKSTEP_CHECK(!o_.filename.empty(), "CSVLogger: filename is empty");
}

CSVLogger::~CSVLogger() {
  if (file_ != nullptr) std::fclose(file_);
}

void CSVLogger::on_train_begin(const Logs&) {
  // Appending to a file that already has rows must not repeat the header.
  std::error_code ec;
  write_header_ = !(o_.append && std::filesystem::exists(o_.filename, ec) && std::filesystem::file_size(o_.filename, ec) > 0);
  if (file_ != nullptr) std::fclose(file_);
  file_ = std::fopen(o_.filename.c_str(), o_.append ? "a" : "w");
  if (file_ == nullptr)
    throw IOError("CSVLogger: cannot open '" + o_.filename + "' for writing: " + std::strerror(errno));
  keys_.clear();
}

void CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (file_ == nullptr) return;
  const char sep = o_.separator;
  if (keys_.empty()) {
    for (const auto& [k, v] : logs) keys_.push_back(k);  // std::map: already sorted, as Keras sorts
    if (write_header_) {
      std::string header = "epoch";
      for (const auto& k : keys_) header += sep + k;
      std::fprintf(file_, "%s\n", header.c_str());
      write_header_ = false;
    }
  }
  std::string row = std::to_string(epoch);
  for (const auto& k : keys_) {
    const auto it = logs.find(k);
    row += sep + (it == logs.end() ? std::string("NA") : float_repr(it->second));
  }
  if (std::fprintf(file_, "%s\n", row.c_str()) < 0 || std::fflush(file_) != 0)
    throw IOError("CSVLogger: cannot write '" + o_.filename + "': " + std::strerror(errno));
}

void CSVLogger::on_train_end(const Logs&) {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

TensorBoard::TensorBoard(TensorBoardOptions options) : o_(std::move(options)) {
  LOCKSTEP_CHECK(o_.histogram_freq >= 0, "TensorBoard: histogram_freq must be >= 0, got ", o_.histogram_freq);
  LOCKSTEP_CHECK(o_.update_freq.batches >= 0, "TensorBoard: update_freq must be 'epoch' or a positive number of batches");
}

io::EventFileWriter& TensorBoard::validation_writer() {
  if (!val_) val_ = std::make_unique<io::EventFileWriter>((std::filesystem::path(o_.log_dir) / "validation").string());
  return *val_;
}

void TensorBoard::on_train_begin(const Logs&) {
  if (!writes_files(o_.is_chief)) return;
  train_ = std::make_unique<io::EventFileWriter>((std::filesystem::path(o_.log_dir) / "train").string());
  batches_ = 0;
  if (o_.write_model_summary)
    if (model_->built()) {
      // Markdown renders the table's columns only inside a code block.
      train_->add_text("model_summary", "```\n" + model_->summary() + "\n```", 0);
    }
  train_->flush();
}

void TensorBoard::on_train_batch_end(std::int64_t batch, const Logs& logs) {
  const std::int64_t ran = span_.end(batch);
  if (!train_ || o_.update_freq.batches <= 0) return;
  // Written when the count of batches passes a multiple of update_freq (one call may close
  // several batches under steps_per_execution).
  const std::int64_t before = batches_;
  batches_ += ran;
  if (batches_ / o_.update_freq.batches == before / o_.update_freq.batches) return;
  // The host's count, which reads nothing: exact but where a replayed loss-scaled step was
  // skipped on the device (counted, as Keras 3's TensorBoard counts every batch).
  const std::int64_t step = model_->optimizer() ? model_->optimizer()->host_iterations() : batches_;
  for (const auto& [k, v] : logs) train_->add_scalar("batch_" + k, v, step);
}

void TensorBoard::on_epoch_end(int epoch, const Logs& logs) {
  if (!train_) return;
  const std::int64_t iterations = model_->optimizer() ? model_->optimizer()->iterations() : 0;
  bool any_val = false;
  for (const auto& [k, v] : logs) {
    if (k.rfind("val_", 0) == 0) {
      const std::string name = k.substr(4);
      validation_writer().add_scalar("epoch_" + name, v, epoch);
      validation_writer().add_scalar("evaluation_" + name + "_vs_iterations", v, iterations);
      any_val = true;
    } else {
      train_->add_scalar("epoch_" + k, v, epoch);
    }
  }
  // The rate once: the logs' where fit put it there (ReduceLROnPlateau's, LearningRateScheduler's).
  if (model_->optimizer() && !logs.contains("learning_rate"))
    train_->add_scalar("epoch_learning_rate", model_->optimizer()->current_learning_rate(), epoch);
  if (o_.histogram_freq > 0 && epoch % o_.histogram_freq == 0)
    for (const auto& var : model_->variables()) train_->add_histogram(var.name() + "_0", var.value(), epoch);
  train_->flush();
  if (any_val) validation_writer().flush();
}

void TensorBoard::on_train_end(const Logs&) {
  if (train_) train_->close();
  if (val_) val_->close();
  train_.reset();
  val_.reset();
}

}  // namespace lockstep
