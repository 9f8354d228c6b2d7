#pragma once
// Zip archives held in memory: what a Keras 3 `.keras` file is (config.json, metadata.json and
// model.weights.h5, stored uncompressed). Reading takes stored and deflated entries; zip64,
// encryption, multi-disk archives and other methods are refused by name.
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::io {

struct ZipEntry {
  std::string name;
  std::string bytes;
};

/// Every entry of the archive whose whole content is `bytes`, in central-directory order, each
/// checked against its CRC-32 and sizes. Throws IOError naming `source` and the problem: not a zip
/// (no end-of-central-directory record), truncated (a record or an entry's data past the end), a
/// CRC or size mismatch, an unsupported feature, or two entries with one name.
std::vector<ZipEntry> decode_zip(std::string_view bytes, const std::string& source);

/// The bytes of a zip archive holding `entries`, stored (method 0, as Python's zipfile writes
/// Keras archives), with a fixed timestamp so that equal content gives equal bytes. ValueError for
/// an empty or duplicate name, or an entry of 4 GiB or more (zip64 is not written).
std::string encode_zip(const std::vector<ZipEntry>& entries);

/// The entry called `name`, or nullptr.
const ZipEntry* find_entry(const std::vector<ZipEntry>& entries, const std::string& name);

}  // namespace lockstep::io
