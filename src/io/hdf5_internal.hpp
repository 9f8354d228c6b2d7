#pragma once
// What the HDF5 writer and reader share: libhdf5's lock, its error text and handles that close.
#include <hdf5.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "lockstep/core/error.hpp"
#include "lockstep/io/hdf5_file.hpp"

namespace lockstep::io::h5 {

// Serial libhdf5 is not thread-safe: every use goes through this lock.
std::mutex& mutex();

// Turns off libhdf5's printing of its error stack (ours become exceptions); once per process.
void quiet();

// The innermost description on libhdf5's error stack as " (libhdf5: ...)", or "", cleared.
std::string error_text();

// The core driver keys open files by name: every in-memory file gets its own.
std::string memory_file_name();

class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  operator hid_t() const { return id_; }  // NOLINT: used where libhdf5 takes an id
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

using Fail = std::function<IOError(const std::string&)>;

enum class KeepData { kYes, kNo };
struct ReadObjectsOptions {
  H5ReadOptions file;
  // kNo: every dataset is read (all that libhdf5 would touch) but not kept, and no Tensor is
  // made: the datasets' values are undefined tensors.
  KeepData keep_data = KeepData::kYes;
};

// Every group and dataset of the open `file` (whose image is `file_size` bytes), walked from the
// root with open handles, each dataset checked (inside the file, within the file's memory
// budget) before it is read. Throws what `fail` makes. Call with mutex() held.
H5Content read_objects(hid_t file, std::size_t file_size, const Fail& fail, const ReadObjectsOptions& options);

}  // namespace lockstep::io::h5
