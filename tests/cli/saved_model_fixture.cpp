// Fixture for the `lockstep evaluate` / `lockstep predict` CLI tests: trains the flagship MLP
// briefly on MNIST and saves it, with .npy inputs beside it.
//   saved_model_fixture DIR  ->  DIR/model/ (model.json, weights.safetensors),
//                                DIR/images.npy (uint8 (8, 28, 28): the first 8 test images),
//                                DIR/features.npy (float32 (8, 784): the same, scaled),
//                                DIR/wrong.npy (float32 (3, 10)),
//                                DIR/colors.npz (--data: 3 classes of uint8 (16, 16, 3) images,
//                                  class c brightest in channel c), DIR/no_y_test.npz (without
//                                  y_test), DIR/mismatched.npz (one label short)
#include <cstdio>
#include <filesystem>
#include <vector>

#include "lockstep/lockstep.hpp"

namespace {
lockstep::datasets::Split colors(std::int64_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> x(static_cast<std::size_t>(n * 16 * 16 * 3)), y(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint8_t>((seed = seed * 1664525u + 1013904223u) >> 25);
  for (std::int64_t e = 0; e < n; ++e) {
    const auto c = static_cast<std::uint8_t>((seed = seed * 1664525u + 1013904223u) >> 30) % 3;
    y[static_cast<std::size_t>(e)] = c;
    for (std::int64_t p = 0; p < 16 * 16; ++p) x[static_cast<std::size_t>((e * 256 + p) * 3 + c)] += 120;
  }
  return {lockstep::Tensor::from_vector(x, {n, 16, 16, 3}), lockstep::Tensor::from_vector(y, {n})};
}
}  // namespace

int main(int argc, char** argv) {
  using namespace lockstep;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    std::filesystem::create_directories(dir);
    const auto data = datasets::mnist::load_data();
    const Tensor x = flatten_and_scale_images(data.train.x);
    Sequential model({layers::Dense(128, "relu", 784), layers::Dropout(0.2f), layers::Dense(10, "softmax")},
                     "flagship");
    model.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    auto ds = data::Dataset::from_tensor_slices(x, data.train.y).shuffle(x.dim(0), 1).batch(64).repeat();
    model.fit(ds, {.epochs = 1, .steps_per_epoch = 300, .verbose = 0});
    save_model(model, dir + "/model");

    const Tensor images = data.test.x.slice(0, 8);
    data::write_npy(dir + "/images.npy", images);
    data::write_npy(dir + "/features.npy", flatten_and_scale_images(images));
    data::write_npy(dir + "/wrong.npy", Tensor::zeros(Shape{3, 10}));
    const auto train = colors(300, 1), test = colors(100, 2);
    data::write_npz(dir + "/colors.npz", {{"x_train", train.x}, {"y_train", train.y}, {"x_test", test.x}, {"y_test", test.y}});
    data::write_npz(dir + "/no_y_test.npz", {{"x_train", train.x}, {"y_train", train.y}, {"x_test", test.x}});
    data::write_npz(dir + "/mismatched.npz",
                    {{"x_train", train.x}, {"y_train", train.y.slice(0, 299)}, {"x_test", test.x}, {"y_test", test.y}});
    std::printf("saved %s/model\n", dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
