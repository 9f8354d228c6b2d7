// Writes what tests/reference/io_reference.py reads with the Python ecosystem's own readers:
// an event file (scalars, a histogram, text), and a checkpoint plus .npy dumps of its tensors.
#include <cstdio>
#include <string>

#include "lockstep/data/npy.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/io/event_file_writer.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  try {
    {
      io::EventFileWriter w(out + "/logs/train");
      for (int s = 0; s < 3; ++s) w.add_scalar("epoch_loss", 1.0 / (s + 1), s);
      std::vector<float> v;
      for (int i = -50; i < 50; ++i) v.push_back(static_cast<float>(i) / 10.0f);
      w.add_histogram("dense/kernel_0", v, 2);
      w.add_text("model_summary", "hello", 0);
    }
    Variable k(Tensor::from_vector<float>({1.5f, -2.25f, 3, 4e-3f, 5, 6}, {2, 3}), "dense/kernel");
    Variable b(Tensor::from_vector<float>({0.5f, -0.5f, 1}, {3}), "dense/bias");
    auto opt = optimizers::Adam(0.01);
    opt->apply_gradients({{Tensor::ones({2, 3}), k}, {Tensor::full({3}, 0.25f), b}});
    io::save_checkpoint(out + "/ckpt", {k, b}, opt.get(), {.epoch = 1});
    data::write_npy(out + "/dense_kernel.npy", k.value());
    data::write_npy(out + "/dense_bias.npy", b.value());
    data::write_npy(out + "/adam_m_kernel.npy", opt->slots(k)[0].second);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "io_reference_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
