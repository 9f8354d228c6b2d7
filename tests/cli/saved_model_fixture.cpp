// Fixture for the `lockstep evaluate` / `lockstep predict` CLI tests: trains the flagship MLP
// briefly on MNIST and saves it, with .npy inputs beside it.
//   saved_model_fixture DIR  ->  DIR/model/ (model.json, weights.safetensors),
//                                DIR/images.npy (uint8 (8, 28, 28): the first 8 test images),
//                                DIR/features.npy (float32 (8, 784): the same, scaled),
//                                DIR/wrong.npy (float32 (3, 10)),
//                                DIR/colors.npz (--data: 3 classes of uint8 (16, 16, 3) images,
//                                  class c brightest in channel c), DIR/no_y_test.npz (without
//                                  y_test), DIR/mismatched.npz (one label short),
//                                DIR/model.keras (the same model as a Keras archive) and broken
//                                  copies of it: truncated.keras (half of it), not_zip.keras,
//                                  conv3d.keras (a Conv3D layer in config.json), missing_weight.keras
//                                  (no layers/dense_1/vars/1), wrong_shape.keras (that bias (9,))
#include <cstdio>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
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

// Broken copies of a good .keras archive, each with one problem.
void write_broken_keras_files(const std::string& dir) {
  using namespace lockstep;
  const std::string good = io::read_file(dir + "/model.keras");
  io::write_file_atomic(dir + "/truncated.keras", good.substr(0, good.size() / 2));
  io::write_file_atomic(dir + "/not_zip.keras", "this is not a zip archive\n");
  const auto entries = io::decode_zip(good, "model.keras");
  const auto with = [&](const std::string& name, const std::string& bytes) {
    auto copy = entries;
    for (auto& e : copy)
      if (e.name == name) e.bytes = bytes;
    return io::encode_zip(copy);
  };
  nlohmann::json config = nlohmann::json::parse(io::find_entry(entries, "config.json")->bytes);
  config["config"]["layers"][1] = {{"module", "keras.layers"},
                                   {"class_name", "Conv3D"},
                                   {"config", {{"name", "conv3d"}, {"filters", 16}}},
                                   {"registered_name", nullptr}};
  io::write_file_atomic(dir + "/conv3d.keras", with("config.json", config.dump()));
  io::H5Content h5 = io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, "model.weights.h5", {.attributes = true});
  io::H5Content missing = h5;
  std::erase_if(missing.datasets, [](const io::H5Dataset& d) { return d.path == "layers/dense_1/vars/1"; });
  io::write_file_atomic(dir + "/missing_weight.keras", with("model.weights.h5", io::encode_hdf5(missing)));
  for (auto& d : h5.datasets)
    if (d.path == "layers/dense_1/vars/1") d.value = Tensor::zeros(Shape{9});
  io::write_file_atomic(dir + "/wrong_shape.keras", with("model.weights.h5", io::encode_hdf5(h5)));
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
    save_model(model, dir + "/model.keras");
    write_broken_keras_files(dir);
    // The same network scaling its own pixels (Keras' preprocessing inside the model), trained on
    // the uint8 images as they are.
    Sequential rescaling({layers::Input(Shape{784}), layers::Rescaling(1.0f / 255.0f), layers::Dense(128, "relu"),
                          layers::Dropout(0.2f), layers::Dense(10, "softmax")},
                         "rescaling");
    rescaling.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    rescaling.fit(data::Dataset::from_tensor_slices(flatten_images_for(data.train.x, true), data.train.y)
                      .shuffle(x.dim(0), 1)
                      .batch(64)
                      .repeat(),
                  {.epochs = 1, .steps_per_epoch = 300, .verbose = 0});
    save_model(rescaling, dir + "/rescaling.keras");

    const Tensor images = data.test.x.slice(0, 8);
    data::write_npy(dir + "/images.npy", images);
    data::write_npy(dir + "/features.npy", flatten_and_scale_images(images));
    data::write_npy(dir + "/pixels.npy", images.reshape({8, 784}).to(DType::kF32));  // unscaled
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
