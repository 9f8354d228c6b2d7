#pragma once
// NumPy's .npz archives (numpy.savez / savez_compressed): a zip of .npy files.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::data {

/// Reads every array of an .npz archive, keyed by name without ".npy" ({"x": ..., "y": ...}
/// for np.savez(path, x=..., y=...)). Members may be stored or deflated (savez_compressed);
/// zip64 records (which numpy writes) are understood. Each member is read as read_npy reads a
/// file, with the same dtypes. Throws IOError naming the path (and the member) for a missing
/// file, a file that is not a zip, a truncated or corrupt archive (bad CRC, bad deflate data),
/// a member that is not .npy, encryption, or another compression method.
std::map<std::string, Tensor> read_npz(const std::string& path);

/// The arrays of an .npz archive that `wanted` names (without ".npy"), and the names of all its
/// arrays. The directory is checked whole, as read_npz does, but only the wanted members are
/// inflated and parsed: an archive's other members cost nothing.
struct NpzSelection {
  std::map<std::string, Tensor> arrays;
  std::vector<std::string> names;
};
NpzSelection read_npz(const std::string& path, const std::set<std::string>& wanted);

struct NpzWriteOptions {
  bool compress = false;  // deflate the members, as numpy.savez_compressed does
};

/// Writes `arrays` as an .npz archive numpy.load reads (member "name.npy" per array). Written
/// under a temporary name and renamed. ValueError for dtypes write_npy refuses.
void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays,
               const NpzWriteOptions& options = {});

}  // namespace lockstep::data
