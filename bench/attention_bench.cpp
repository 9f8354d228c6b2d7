// The fused scaled_dot_product_attention against its unfused composition (attention_reference)
// on this CPU: forward, and forward + backward through the tape, best of a few runs each, and
// each one's peak allocator memory.
//   attention_bench [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/attention.hpp"
#include "lockstep/tensor/compute_context.hpp"

using namespace lockstep;

namespace {
Tensor random(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, s);
}

template <typename F>
double best_ms(F&& f, int runs) {
  double best = 1e300;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  auto ctx = make_compute_context(Device{}, threads);
  ComputeScope scope(*ctx);
  std::printf("%-28s %10s %10s %12s %12s\n", "b h t d causal", "fused ms", "unfused ms", "fused MiB",
              "unfused MiB");
  struct Case {
    std::int64_t b, h, t, d;
    bool causal;
  };
  for (const Case c : {Case{8, 4, 128, 32, false}, Case{2, 4, 512, 64, true}, Case{1, 2, 2048, 64, true},
                       Case{1, 1, 4096, 64, true}}) {
    const Tensor q = random({c.b, c.h, c.t, c.d}, 1), k = random({c.b, c.h, c.t, c.d}, 2),
                 v = random({c.b, c.h, c.t, c.d}, 3), dy = random({c.b, c.h, c.t, c.d}, 4);
    const AttentionOptions o{.causal = c.causal};
    for (bool backward : {false, true}) {
      double ms[2], mib[2];
      for (int fused = 1; fused >= 0; --fused) {
        const auto step = [&] {
          GradientTape tape;
          if (backward)
            for (const Tensor* t : {&q, &k, &v}) tape.watch(*t);
          const Tensor out =
              fused ? scaled_dot_product_attention(q, k, v, {}, o) : attention_reference(q, k, v, {}, o);
          if (backward) (void)tape.gradient(out, std::vector<Tensor>{q, k, v}, dy);
        };
        step();  // warm the caches
        const std::uint64_t before = context_bytes_in_use(*ctx);
        reset_context_peak_bytes(*ctx);
        ms[fused] = best_ms(step, 3);
        mib[fused] = static_cast<double>(context_peak_bytes(*ctx) - before) / (1 << 20);
      }
      char name[64];
      std::snprintf(name, sizeof name, "%lld %lld %lld %lld %s%s", static_cast<long long>(c.b),
                    static_cast<long long>(c.h), static_cast<long long>(c.t), static_cast<long long>(c.d),
                    c.causal ? "causal" : "-", backward ? " +bwd" : "");
      std::printf("%-28s %10.2f %10.2f %12.1f %12.1f\n", name, ms[1], ms[0], mib[1], mib[0]);
    }
  }
  return 0;
}
