// The C++ user's alternative to lockstep: the flagship MLP trained with libtorch (Debian's
// libtorch-dev, PyTorch 1.13's C++ API) in a plain C++ loop, as bench/reference_mlp.py trains it in
// Python: Linear(784, H) -> ReLU -> Dropout(0.2) -> Linear(H, 10), Glorot-uniform kernels and zero
// biases, Adam(1e-3, eps 1e-7), cross-entropy on logits, MNIST pixels scaled to [0, 1], batches of
// a permutation drawn once an epoch.
//
//   reference_libtorch --data DIR [--threads 1] [--steps 2000] [--batch 64] [--hidden 128]
//                      [--warmup-frac 0.05]
//
// DIR holds train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz. The last stdout line is
// steps/second over the steps after the warm-up fraction (reference_mlp.py's measure()); what it
// ran goes to stderr. bench/reference_mlp.py builds it (g++, against libtorch-dev) and runs it as
// the framework "libtorch", with each of PyTorch's thread pools given the cores in turn.
#include <torch/torch.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<std::uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<std::uint8_t> out;
  std::uint8_t buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  if (n < 0) throw std::runtime_error("cannot read " + path);
  return out;
}

std::uint32_t be32(const std::vector<std::uint8_t>& b, std::size_t at) {
  if (b.size() < at + 4) throw std::runtime_error("IDX file too short");
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) | (std::uint32_t{b[at + 2]} << 8) | b[at + 3];
}

// Images as float32 (n, 784) in [0, 1] and labels as int64 (n).
std::pair<torch::Tensor, torch::Tensor> load_mnist(const std::string& dir) {
  const auto img = read_gz(dir + "/train-images-idx3-ubyte.gz");
  const auto lab = read_gz(dir + "/train-labels-idx1-ubyte.gz");
  if (be32(img, 0) != 2051 || be32(lab, 0) != 2049) throw std::runtime_error("not MNIST IDX files in " + dir);
  const std::int64_t n = be32(img, 4), rows = be32(img, 8), cols = be32(img, 12);
  if (rows * cols != 784 || be32(lab, 4) != n || img.size() < 16 + static_cast<std::size_t>(n) * 784 ||
      lab.size() < 8 + static_cast<std::size_t>(n))
    throw std::runtime_error("unexpected MNIST sizes in " + dir);
  auto x = torch::from_blob(const_cast<std::uint8_t*>(img.data() + 16), {n, 784}, torch::kUInt8)
               .to(torch::kFloat32)
               .div_(255.0);
  auto y = torch::from_blob(const_cast<std::uint8_t*>(lab.data() + 8), {n}, torch::kUInt8).to(torch::kInt64);
  return {x, y};
}

struct Mlp : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
  explicit Mlp(std::int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(784, hidden));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 10));
    for (auto* l : {&fc1, &fc2}) {
      torch::nn::init::xavier_uniform_((*l)->weight);
      torch::nn::init::zeros_((*l)->bias);
    }
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
};

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string data = arg(argc, argv, "--data", "");
  const int threads = std::stoi(arg(argc, argv, "--threads", "1"));
  const int steps = std::stoi(arg(argc, argv, "--steps", "2000"));
  const std::int64_t batch = std::stoll(arg(argc, argv, "--batch", "64"));
  const std::int64_t hidden = std::stoll(arg(argc, argv, "--hidden", "128"));
  const double warmup_frac = std::stod(arg(argc, argv, "--warmup-frac", "0.05"));
  if (data.empty() || threads < 1 || steps < 20 || batch < 1 || hidden < 1 || warmup_frac < 0 || warmup_frac >= 0.9) {
    std::fprintf(stderr, "reference_libtorch: usage: --data DIR [--threads T>=1] [--steps N>=20] [--batch B] "
                         "[--hidden H] [--warmup-frac F in [0, 0.9)]\n");
    return 2;
  }
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  auto [x, y] = load_mnist(data);
  const std::int64_t n = x.size(0);
  if (batch > n) throw std::runtime_error("batch larger than the data set");

  Mlp model(hidden);
  torch::optim::Adam opt(model.parameters(), torch::optim::AdamOptions(1e-3).eps(1e-7));
  model.train();
  torch::Tensor xs, ys, loss;
  std::int64_t pos = n;  // draws the first permutation
  std::vector<double> times;
  times.reserve(steps);
  for (int s = 0; s < steps; ++s) {
    if (pos + batch > n) {  // new epoch: reshuffle once, outside the step
      const auto perm = torch::randperm(n);
      xs = x.index_select(0, perm);
      ys = y.index_select(0, perm);
      pos = 0;
    }
    const auto xb = xs.narrow(0, pos, batch), yb = ys.narrow(0, pos, batch);
    pos += batch;
    opt.zero_grad();
    loss = torch::nn::functional::cross_entropy(model.forward(xb), yb);
    loss.backward();
    opt.step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  const int count = static_cast<int>(times.size());
  const int w = std::min(std::max(1, static_cast<int>(std::lround(count * warmup_frac))), count - 2);
  const double sps = (count - 1 - w) / (times.back() - times[w]);
  std::fprintf(stderr, "[reference_libtorch] libtorch %d.%d.%d: %d steps of %lld, hidden %lld, %d thread(s), last loss %.4f, "
               "%.1f steps/s\n", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH, steps, static_cast<long long>(batch), static_cast<long long>(hidden),
               threads, loss.item<float>(), sps);
  std::printf("%.6f\n", sps);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "reference_libtorch: %s\n", e.what());
  return 1;
}
