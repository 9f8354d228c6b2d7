#include "lockstep/layers/initializers.hpp"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <random>
#include <vector>

#include "lockstep/core/error.hpp"

namespace lockstep::layers {

std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Tensor Initializer::operator()(const Shape& shape, std::uint64_t seed) const {
  // Drawn on the host (one RNG stream, whatever the device) in chunks copied into the tensor.
  // The tensor is made first: an impossible size is refused, naming the bytes asked, before any
  // host buffer of that size (a bare std::bad_alloc once said neither).
  const std::int64_t n = shape.numel();
  Tensor out = Tensor::empty(shape);
  // Keras: for a (rows, cols) kernel fan_in = rows, fan_out = cols; for higher ranks the
  // leading dims are the receptive field.
  double fan_in = 1, fan_out = 1;
  if (shape.rank() == 1) {
    fan_in = fan_out = static_cast<double>(shape[0]);
  } else if (shape.rank() >= 2) {
    double receptive = 1;
    for (std::size_t i = 0; i + 2 < shape.rank(); ++i) receptive *= static_cast<double>(shape.dims()[i]);
    fan_in = static_cast<double>(shape[-2]) * receptive;
    fan_out = static_cast<double>(shape[-1]) * receptive;
  }
  std::mt19937_64 rng(seed);
  std::vector<float> p(static_cast<std::size_t>(std::min<std::int64_t>(n, std::int64_t{1} << 16)));
  // Values in order 0..n-1 from one generator, whatever the chunking.
  const auto fill = [&](auto&& next) {
    for (std::int64_t at = 0; at < n; at += static_cast<std::int64_t>(p.size())) {
      const auto m = static_cast<std::size_t>(std::min<std::int64_t>(n - at, static_cast<std::int64_t>(p.size())));
      for (std::size_t i = 0; i < m; ++i) p[i] = next();
      out.copy_from_host(p.data(), m * sizeof(float), static_cast<std::size_t>(at) * sizeof(float));
    }
  };
  if (name == "zeros") {
    fill([] { return 0.0f; });
  } else if (name == "ones") {
    fill([] { return 1.0f; });
  } else if (name == "glorot_uniform" || name == "he_uniform") {
    const double limit = name == "glorot_uniform" ? std::sqrt(6.0 / (fan_in + fan_out)) : std::sqrt(6.0 / fan_in);
    std::uniform_real_distribution<double> u(-limit, limit);
    fill([&] { return static_cast<float>(u(rng)); });
  } else if (name == "uniform") {
    // Keras' "uniform": RandomUniform(minval=-0.05, maxval=0.05), Embedding's default.
    std::uniform_real_distribution<double> u(-0.05, 0.05);
    fill([&] { return static_cast<float>(u(rng)); });
  } else if (name == "glorot_normal" || name == "he_normal") {
    // Truncated at two standard deviations, rescaled as Keras does.
    const double var = name == "glorot_normal" ? 2.0 / (fan_in + fan_out) : 2.0 / fan_in;
    const double stddev = std::sqrt(var) / 0.87962566103423978;
    std::normal_distribution<double> g(0.0, 1.0);
    fill([&] {
      double z;
      do z = g(rng);
      while (std::fabs(z) > 2.0);
      return static_cast<float>(z * stddev);
    });
  } else if (name == "orthogonal") {
    // Keras' Orthogonal(gain=1.0): the Q of a normal (max, min) matrix of (rows = the product of
    // the leading dims, cols = the last), its columns' signs those of R's diagonal (what modified
    // Gram-Schmidt gives), transposed where rows < cols.
    LOCKSTEP_CHECK(n == 0 || shape.rank() >= 2, "initializer 'orthogonal' needs a shape of rank 2 or more, got ",
                   shape.str());
    if (n == 0) return out;
    const std::int64_t cols = shape[-1], rows = n / cols;
    const std::int64_t big = std::max(rows, cols), small = std::min(rows, cols);
    std::normal_distribution<double> g(0.0, 1.0);
    std::vector<double> a(static_cast<std::size_t>(big * small));  // row-major (big, small)
    for (auto& v : a) v = g(rng);
    const auto at = [&](std::int64_t i, std::int64_t j) -> double& {
      return a[static_cast<std::size_t>(i * small + j)];
    };
    for (std::int64_t j = 0; j < small; ++j) {
      for (std::int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (std::int64_t i = 0; i < big; ++i) dot += at(i, k) * at(i, j);
        for (std::int64_t i = 0; i < big; ++i) at(i, j) -= dot * at(i, k);
      }
      double norm = 0;
      for (std::int64_t i = 0; i < big; ++i) norm += at(i, j) * at(i, j);
      norm = std::sqrt(norm);
      for (std::int64_t i = 0; i < big; ++i) at(i, j) /= norm;
    }
    std::vector<float> q(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        q[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(rows >= cols ? at(r, c) : at(c, r));
    out.copy_from_host(q.data(), q.size() * sizeof(float), 0);
  } else {
    throw ValueError("unknown initializer '" + name +
                     "': expected glorot_uniform, glorot_normal, he_normal, he_uniform, uniform, orthogonal, zeros "
                     "or ones");
  }
  return out;
}

}  // namespace lockstep::layers

namespace lockstep {
namespace {
std::atomic<std::uint64_t> g_seed{0};
}
void set_random_seed(std::uint64_t seed) { g_seed.store(seed); }
std::uint64_t random_seed() { return g_seed.load(); }
}  // namespace lockstep
