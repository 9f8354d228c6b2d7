#pragma once
// HDF5 files held in memory (libhdf5's core driver): what Keras 3 keeps weights in
// (`.weights.h5`, and `model.weights.h5` inside a `.keras` archive). Only what those files use:
// groups with string attributes, and contiguous float32 / int64 datasets.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::io {

struct H5Group {
  std::string path;  // "layers/dense/vars", no leading '/'
  std::map<std::string, std::string> attributes;
};

struct H5Dataset {
  std::string path;  // "layers/dense/vars/0"
  Tensor value;      // read: a host tensor; written: from any device (copied to the host)
};

struct H5Content {
  /// Parents before children (as written, and as read: in name order).
  std::vector<H5Group> groups;
  std::vector<H5Dataset> datasets;
  const H5Group* find_group(const std::string& path) const;
  const Tensor* find_dataset(const std::string& path) const;
};

/// The bytes of an HDF5 file holding `content`: each group (parents made as needed) with its
/// attributes as UTF-8 strings (as h5py writes them), each dataset contiguous, little-endian
/// float32 or int64. ValueError for another dtype or a path that is empty or repeated.
std::string encode_hdf5(const H5Content& content);

struct H5ReadOptions {
  /// Also read groups' string attributes. Off for loading: libhdf5 follows a variable-length
  /// string into the file's global heap without checking it, so a corrupt file can crash it there
  /// (found by flipping bits of Keras weight files; the checking child now turns that into an
  /// IOError); nothing lockstep loads needs the attributes.
  bool attributes = false;
};

/// Every group and dataset of the HDF5 file whose whole content is `bytes`. Floating datasets are
/// read as float32 and integer ones as int64; string attributes are kept, others skipped.
/// IOError "<source>: <problem>" (source names the file, e.g. "HDF5 file 'w.h5'"), with libhdf5's
/// own description where it has one, for a file that is not HDF5, truncated or corrupt; a dataset
/// of another type; data not inside the file (external storage, a virtual dataset, a soft or
/// external link); more memory than the file's size can justify (a shape beyond it, chunks never
/// written, a second path to one object); groups nested deeper than 64 or names beyond the file's
/// size. The whole read first runs in a forked child process: a file that crashes libhdf5 1.10 or
/// stalls it (30 s and more for big files) is an IOError here, not the end of the process. The
/// fork costs time in proportion to the process's resident memory (~30 ms for a CLI-sized one).
H5Content decode_hdf5(std::string_view bytes, const std::string& source, const H5ReadOptions& options = {});

}  // namespace lockstep::io
