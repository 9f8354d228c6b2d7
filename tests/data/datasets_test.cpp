#include <gtest/gtest.h>

#include <filesystem>

#include "data/test_util.hpp"
#include "lockstep/data/idx.hpp"
#include "lockstep/datasets/fashion_mnist.hpp"
#include "lockstep/datasets/mnist.hpp"

using namespace lockstep;
using lockstep::test::EnvOverride;
using lockstep::test::TempDir;

namespace {

// Writes a tiny MNIST-format dataset (n train and n test images) into `dir`, gzip or raw.
void write_fake_mnist(const std::string& dir, std::int64_t n, bool gzip) {
  std::filesystem::create_directories(dir);
  const std::string suffix = gzip ? ".gz" : "";
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 10);
  for (const char* split : {"train", "t10k"}) {
    data::write_idx(dir + "/" + split + "-images-idx3-ubyte" + suffix, Tensor::zeros({n, 28, 28}, DType::kU8),
                    {.gzip = gzip});
    data::write_idx(dir + "/" + split + "-labels-idx1-ubyte" + suffix, Tensor::from_vector(labels, {n}),
                    {.gzip = gzip});
  }
}

}  // namespace

TEST(DataDatasets, DataDirFollowsEnvironment) {
  {
    EnvOverride env("LOCKSTEP_DATA_DIR", "/some/where");
    EXPECT_EQ(datasets::data_dir(), "/some/where");
  }
  EnvOverride env("LOCKSTEP_DATA_DIR", std::nullopt);
  EnvOverride home("HOME", "/home/someone");
  EXPECT_EQ(datasets::data_dir(), "/home/someone/.lockstep/datasets");
}

TEST(DataDatasets, MissingFileNamesPathAndSetupScript) {
  TempDir dir;
  EnvOverride env("LOCKSTEP_DATA_DIR", dir.path());
  try {
    datasets::mnist::load_data();
    FAIL() << "no IOError";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.path() + "/mnist/train-images-idx3-ubyte"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.path() + "/mnist/train-images-idx3-ubyte.gz"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scripts/setup.sh"), std::string::npos) << msg;
  }
  try {
    datasets::fashion_mnist::load_data(dir.path());
    FAIL() << "no IOError";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path() + "/train-images-idx3-ubyte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scripts/setup.sh"), std::string::npos) << e.what();
  }
}

TEST(DataDatasets, LoadsRawAndGzipFilesFromTheDataDir) {
  for (bool gzip : {false, true}) {
    TempDir dir;
    write_fake_mnist(dir.path() + "/mnist", 12, gzip);
    EnvOverride env("LOCKSTEP_DATA_DIR", dir.path());
    const auto [train, test] = datasets::mnist::load_data();
    EXPECT_EQ(train.x.shape(), (Shape{12, 28, 28}));
    EXPECT_EQ(train.y.shape(), (Shape{12}));
    EXPECT_EQ(test.y.to_vector<std::uint8_t>()[11], 1);
  }
}

TEST(DataDatasets, MismatchedLabelsNameTheFiles) {
  TempDir dir;
  write_fake_mnist(dir.path(), 4, false);
  data::write_idx(dir.file("t10k-labels-idx1-ubyte"), Tensor::zeros({3}, DType::kU8));
  try {
    datasets::mnist::load_data(dir.path());
    FAIL() << "no IOError";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("t10k-labels-idx1-ubyte")), std::string::npos) << e.what();
  }
}

// Valid IDX files with no images once gave "test_loss: 0.0000" (status 0) or "Dense: input_dim must
// be positive"; the split's file and the count are named instead.
TEST(DataDatasets, EmptySplitsNameTheFileAndTheCount) {
  for (const char* split : {"train", "t10k"}) {
    TempDir dir;
    write_fake_mnist(dir.path(), 4, false);
    const std::string images = dir.file(std::string(split) + "-images-idx3-ubyte");
    data::write_idx(images, Tensor::zeros({0, 28, 28}, DType::kU8));
    data::write_idx(dir.file(std::string(split) + "-labels-idx1-ubyte"), Tensor::zeros({0}, DType::kU8));
    try {
      datasets::mnist::load_data(dir.path());
      FAIL() << "no IOError for an empty " << split << " split";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + images + "' holds 0 images"), std::string::npos) << e.what();
    }
  }
}

namespace {
void check_real(const datasets::TrainTest& d) {
  EXPECT_EQ(d.train.x.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(d.train.y.shape(), (Shape{60000}));
  EXPECT_EQ(d.test.x.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(d.test.y.shape(), (Shape{10000}));
  EXPECT_EQ(d.train.x.dtype(), DType::kU8);
  for (const Tensor* y : {&d.train.y, &d.test.y}) {
    std::vector<int> count(10);
    for (auto v : y->to_vector<std::uint8_t>()) {
      ASSERT_LT(v, 10);
      ++count[v];
    }
    for (int c : count) EXPECT_GT(c, 0);
  }
}
}  // namespace

TEST(DataDatasets, RealMnistWhenPresent) {
  const std::string dir = datasets::data_dir() + "/mnist";
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(dir + "/train-images-idx3-ubyte")) {
    GTEST_SKIP() << "MNIST not in " << dir << "; run scripts/setup.sh";
  }
  const auto d = datasets::mnist::load_data();
  check_real(d);
  EXPECT_EQ(d.train.y.to_vector<std::uint8_t>()[0], 5);  // MNIST's first training digit is a 5
}

TEST(DataDatasets, RealFashionMnistWhenPresent) {
  bool found = false;
  for (const std::string& dir : {datasets::data_dir() + "/fashion_mnist", std::string("/usr/share/datasets/fashion-mnist")}) {
    found = found || std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") ||
            std::filesystem::exists(dir + "/train-images-idx3-ubyte");
  }
  if (!found) GTEST_SKIP() << "Fashion-MNIST not found; run scripts/setup.sh";
  check_real(datasets::fashion_mnist::load_data());
}
