// The built-in datasets: MNIST and Fashion-MNIST, read from IDX files in the data directory.
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/env.hpp"
#include "lockstep/data/idx.hpp"
#include "lockstep/datasets/fashion_mnist.hpp"
#include "lockstep/datasets/mnist.hpp"

namespace lockstep::datasets {

namespace {

constexpr const char* kSetupHint = "run scripts/setup.sh from the lockstep repository (it puts the files there), "
                                   "or set LOCKSTEP_DATA_DIR to a folder that holds them";
constexpr const char* kDebianFashionDir = "/usr/share/datasets/fashion-mnist";

// The first of `dirs`/name or `dirs`/name.gz that exists; IOError listing every path tried.
std::string find_file(const std::vector<std::string>& dirs, const std::string& name, const char* dataset) {
  std::string tried;
  for (const auto& dir : dirs) {
    for (const auto& candidate : {dir + "/" + name, dir + "/" + name + ".gz"}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
      tried += (tried.empty() ? "" : ", ") + candidate;
    }
  }
  throw IOError(std::string(dataset) + " file '" + name + "' not found; looked for " + tried + ". To get it, " +
                kSetupHint);
}

Split load_split(const std::vector<std::string>& dirs, const std::string& prefix, const char* dataset) {
  const std::string images_path = find_file(dirs, prefix + "-images-idx3-ubyte", dataset);
  const std::string labels_path = find_file(dirs, prefix + "-labels-idx1-ubyte", dataset);
  Split s{data::read_idx(images_path), data::read_idx(labels_path)};
  if (s.x.dtype() != DType::kU8 || s.x.rank() != 3 || s.x.dim(1) != 28 || s.x.dim(2) != 28) {
    throw IOError(std::string(dataset) + ": '" + images_path + "' holds " + dtype_name(s.x.dtype()) + " " +
                  s.x.shape().str() + ", not uint8 (N, 28, 28) images");
  }
  if (s.y.dtype() != DType::kU8 || s.y.rank() != 1 || s.y.dim(0) != s.x.dim(0)) {
    throw IOError(std::string(dataset) + ": '" + labels_path + "' holds " + dtype_name(s.y.dtype()) + " " +
                  s.y.shape().str() + ", not uint8 labels of shape (" + std::to_string(s.x.dim(0)) +
                  ",) to match the images in '" + images_path + "'");
  }
  // Valid IDX, but nothing to train or test on: "test_loss: 0.0000" or "Dense: input_dim must be
  // positive" would follow, naming neither the file nor the cause.
  if (s.x.dim(0) == 0)
    throw IOError(std::string(dataset) + ": '" + images_path + "' holds 0 images; the " +
                  (prefix == "train" ? "training" : "test") + " split needs at least one");
  return s;
}

TrainTest load_mnist_format(const std::vector<std::string>& dirs, const char* dataset) {
  return {load_split(dirs, "train", dataset), load_split(dirs, "t10k", dataset)};
}

}  // namespace

std::string data_dir() {
  if (std::string dir = env::text("LOCKSTEP_DATA_DIR"); !dir.empty()) return dir;
  if (const std::string home = env::text("HOME"); !home.empty()) return home + "/.lockstep/datasets";
  throw IOError("cannot find the dataset directory: neither LOCKSTEP_DATA_DIR nor HOME is set; set "
                "LOCKSTEP_DATA_DIR and run scripts/setup.sh");
}

namespace mnist {
TrainTest load_data() { return load_data(data_dir() + "/mnist"); }
TrainTest load_data(const std::string& dir) { return load_mnist_format({dir}, "MNIST"); }
}  // namespace mnist

namespace fashion_mnist {
TrainTest load_data() { return load_mnist_format({data_dir() + "/fashion_mnist", kDebianFashionDir}, "Fashion-MNIST"); }
TrainTest load_data(const std::string& dir) { return load_mnist_format({dir}, "Fashion-MNIST"); }
}  // namespace fashion_mnist

}  // namespace lockstep::datasets
