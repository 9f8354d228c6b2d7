#pragma once
// TensorBoard event files, as tf.summary writes them: <logdir>/events.out.tfevents.<unix
// seconds>.<host>.<pid>.<n>.v2, a TFRecord file whose first record is Event{file_version:
// "brain.Event:2"} and whose others are Events with one Summary value each.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::io {

class EventFileWriter {
 public:
  /// Creates `logdir` (and parents) and a new event file in it. IOError names the directory or
  /// the file that cannot be created.
  explicit EventFileWriter(const std::string& logdir);
  /// Flushes; errors at this point are swallowed (a destructor cannot report them), so call
  /// flush() or close() to see them.
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// A scalar as Summary.Value.simple_value (what TensorBoard's scalar dashboard reads).
  void add_scalar(const std::string& tag, double value, std::int64_t step);
  /// A HistogramProto with TensorFlow's default buckets (histogram.hpp) of a float32 tensor's values.
  void add_histogram(const std::string& tag, const Tensor& values, std::int64_t step);
  void add_histogram(const std::string& tag, const std::vector<float>& values, std::int64_t step);
  /// Text as tf.summary.text writes it: a scalar DT_STRING tensor with plugin "text" metadata.
  void add_text(const std::string& tag, const std::string& text, std::int64_t step);
  /// Pushes buffered events to the file (TensorBoard then sees them). IOError names the file.
  void flush();
  void close();

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& serialized_event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace lockstep::io
