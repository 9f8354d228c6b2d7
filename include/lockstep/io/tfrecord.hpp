#pragma once
// TFRecord framing, the container of TensorBoard event files:
//   u64 length | u32 masked_crc32c(length bytes) | data | u32 masked_crc32c(data), little-endian.
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::io {

/// One framed record.
std::string frame_tfrecord(std::string_view data);

/// Every record of a TFRecord file image, each frame's two CRCs checked. IOError names `source`,
/// the record's index and byte offset for a bad CRC or a record cut short.
std::vector<std::string> parse_tfrecords(std::string_view bytes, const std::string& source);

}  // namespace lockstep::io
