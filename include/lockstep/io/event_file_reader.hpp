#pragma once
// Reads TensorBoard event files back (tf.compat.v1.train.summary_iterator's job), checking every
// record's CRCs; for tests and tools that inspect what training logged.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/io/histogram.hpp"

namespace lockstep::io {

struct EventValue {
  enum class Kind { kScalar, kHistogram, kText, kOther };
  std::string tag;
  Kind kind = Kind::kOther;
  double scalar = 0;        // kScalar
  HistogramData histogram;  // kHistogram
  std::string text;         // kText
  std::string plugin_name;  // from the value's metadata, if any
};

struct EventRecord {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;  // set on the first record only
  std::vector<EventValue> values;
};

/// Every event of the file in order. IOError names the file for a bad CRC, a truncated record
/// or a record that is not an Event.
std::vector<EventRecord> read_event_file(const std::string& path);

}  // namespace lockstep::io
