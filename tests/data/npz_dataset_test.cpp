// datasets::load_npz: keras.datasets' four arrays from an .npz, and each way such a file can be
// wrong reported as an IOError naming the file and the problem.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "lockstep/data/npz.hpp"
#include "lockstep/datasets/npz_dataset.hpp"
#include "test_util.hpp"

namespace lockstep {
namespace {

using Arrays = std::map<std::string, Tensor>;

Arrays good() {
  return {{"x_train", Tensor::zeros({4, 3, 2}, DType::kU8)},
          {"y_train", Tensor::from_vector<std::int64_t>({0, 2, 1, 2}, {4})},
          {"x_test", Tensor::zeros({2, 3, 2}, DType::kU8)},
          {"y_test", Tensor::from_vector<std::uint8_t>({1, 4}, {2, 1})}};
}

TEST(NpzDataset, ReadsTheFourArraysWithLabelsAsInt64) {
  test::TempDir dir;
  data::write_npz(dir.file("d.npz"), good());
  const datasets::TrainTest d = datasets::load_npz(dir.file("d.npz"));
  EXPECT_EQ(d.train.x.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(d.test.y.shape(), (Shape{2}));  // (N, 1) labels become (N,)
  EXPECT_EQ(d.test.y.dtype(), DType::kI64);
  EXPECT_EQ(datasets::num_classes(d), 5);
}

TEST(NpzDataset, EachKindOfBadFileIsAnIOErrorNamingTheFileAndTheProblem) {
  test::TempDir dir;
  const auto expect_bad = [&](const std::string& name, Arrays arrays, const std::string& problem) {
    data::write_npz(dir.file(name), arrays);
    test::expect_io_error([&] { datasets::load_npz(dir.file(name)); }, {name, problem});
  };
  Arrays a = good();
  a.erase("y_test");
  expect_bad("no_y_test.npz", a, "has no array 'y_test'");
  a = good();
  a["y_train"] = Tensor::from_vector<std::int64_t>({0, 1, 2}, {3});
  expect_bad("short.npz", a, "x_train has 4 examples but y_train has 3 labels");
  a = good();
  a["y_test"] = Tensor::from_vector<float>({0.5f, 1}, {2});
  expect_bad("float_labels.npz", a, "y_test holds float32; give integer class labels");
  a = good();
  a["y_train"] = Tensor::from_vector<std::int64_t>({0, -1, 1, 2}, {4});
  expect_bad("negative.npz", a, "y_train[1] is -1");
  a = good();
  a["x_test"] = Tensor::zeros({2, 2, 3}, DType::kU8);
  expect_bad("shapes.npz", a, "x_train examples are (3, 2) but x_test examples are (2, 3)");
  a = good();
  a["x_train"] = Tensor::zeros({0, 3, 2}, DType::kU8);
  a["y_train"] = Tensor::zeros({0}, DType::kI64);
  expect_bad("empty.npz", a, "x_train has no examples");
  test::write_bytes(dir.file("not_zip.npz"), "plain text");
  test::expect_io_error([&] { datasets::load_npz(dir.file("not_zip.npz")); }, {"not_zip.npz"});
}

TEST(NpzDataset, AnyTargetsKeepsRegressionValuesAndRowsAndLabelsStayLabels) {
  test::TempDir dir;
  const auto load = [&](const std::string& name, Arrays arrays) {
    data::write_npz(dir.file(name), arrays);
    return datasets::load_npz(dir.file(name), {.any_targets = true});
  };
  Arrays a = good();
  a["y_train"] = Tensor::from_vector<float>({0.5f, -1.5f, 2, 3}, {4});
  a["y_test"] = Tensor::from_vector<float>({1, 2}, {2});
  datasets::TrainTest d = load("regression.npz", a);
  EXPECT_EQ(d.train.y.dtype(), DType::kF32);
  EXPECT_EQ(d.train.y.to_vector<float>(), (std::vector<float>{0.5f, -1.5f, 2, 3}));
  a["y_train"] = Tensor::from_vector<std::uint8_t>({1, 0, 0, 1, 0, 1, 0, 1}, {4, 2});  // one-hot rows as bytes
  a["y_test"] = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  d = load("one_hot.npz", a);
  EXPECT_EQ(d.train.y.shape(), (Shape{4, 2}));
  EXPECT_EQ(d.train.y.dtype(), DType::kF32);
  d = load("labels.npz", good());  // integer labels are class labels either way
  EXPECT_EQ(d.test.y.shape(), (Shape{2}));
  EXPECT_EQ(d.test.y.dtype(), DType::kI64);

  const auto expect_bad = [&](const std::string& name, Arrays arrays, const std::string& problem) {
    data::write_npz(dir.file(name), arrays);
    test::expect_io_error([&] { datasets::load_npz(dir.file(name), {.any_targets = true}); }, {name, problem});
  };
  a = good();
  a["y_test"] = Tensor::from_vector<float>({1, 0, 0, 1, 0, 0}, {2, 3});
  expect_bad("widths.npz", a, "y_train has shape (4,) but y_test has shape (2, 3)");
  a = good();
  a["y_test"] = Tensor::from_vector<float>({1, 2}, {2});
  expect_bad("kinds.npz", a, "y_train holds int64 but y_test holds float32");
  a = good();
  a["y_train"] = Tensor::zeros({4, 2, 2});
  expect_bad("rank3.npz", a, "y_train has shape (4, 2, 2); give one target per example (N,) or one row (N, k)");
}

}  // namespace
}  // namespace lockstep
