// The fused scaled_dot_product_attention against its unfused composition (attention_reference)
// on this CPU: forward, and forward + backward through the tape, at the transformer models'
// short sequences (ViT 49 tokens, the character GPT's 64, many batch x heads) and at long ones.
// The two run in interleaved rounds (a loaded machine slows both alike); the speedup column is
// the median over rounds of unfused / fused time, with its range; ms are the rounds' medians.
// MiB: each one's peak allocator memory.
//   attention_bench [threads] [rounds] [t]   (t: only the shapes of that sequence length)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/attention.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "random_tensor.hpp"

using namespace lockstep;

namespace {
// Milliseconds per call of f, over enough calls to fill about 20 ms.
template <typename F>
double ms_per_call(F&& f) {
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double ms = 0;
  do {
    f();
    ++calls;
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } while (ms < 20.0);
  return ms / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const long long only_t = argc > 3 ? std::atoll(argv[3]) : 0;
  auto ctx = make_compute_context(Device{}, threads);
  ComputeScope scope(*ctx);
  std::printf("%-30s %9s %10s %20s %10s %11s\n", "b h t d causal", "fused ms", "unfused ms",
              "unfused/fused [range]", "fused MiB", "unfused MiB");
  struct Case {
    std::int64_t b, h, t, d;
    bool causal;
  };
  for (const Case c : {Case{16, 4, 49, 16, false}, Case{16, 4, 64, 32, true}, Case{16, 4, 128, 32, false},
                       Case{2, 4, 512, 64, true}, Case{1, 1, 4096, 64, true}}) {
    if (only_t != 0 && c.t != only_t) continue;
    const Tensor q = random_tensor({c.b, c.h, c.t, c.d}, 1), k = random_tensor({c.b, c.h, c.t, c.d}, 2),
                 v = random_tensor({c.b, c.h, c.t, c.d}, 3), dy = random_tensor({c.b, c.h, c.t, c.d}, 4);
    const AttentionOptions o{.causal = c.causal};
    for (bool backward : {false, true}) {
      std::vector<double> ms[2], ratio;
      double mib[2];
      const auto step = [&](bool fused) {
        GradientTape tape;
        if (backward)
          for (const Tensor* t : {&q, &k, &v}) tape.watch(*t);
        const Tensor out =
            fused ? scaled_dot_product_attention(q, k, v, {}, o) : attention_reference(q, k, v, {}, o);
        if (backward) (void)tape.gradient(out, std::vector<Tensor>{q, k, v}, dy);
      };
      for (int fused = 1; fused >= 0; --fused) {
        step(fused);  // warm the caches
        const std::uint64_t before = context_bytes_in_use(*ctx);
        reset_context_peak_bytes(*ctx);
        step(fused);
        mib[fused] = static_cast<double>(context_peak_bytes(*ctx) - before) / (1 << 20);
      }
      for (int r = 0; r < rounds; ++r) {
        const double f = ms_per_call([&] { step(true); }), u = ms_per_call([&] { step(false); });
        ms[1].push_back(f);
        ms[0].push_back(u);
        ratio.push_back(u / f);
      }
      char name[64], range[64];
      std::snprintf(name, sizeof name, "%lld %lld %lld %lld %s%s", static_cast<long long>(c.b),
                    static_cast<long long>(c.h), static_cast<long long>(c.t), static_cast<long long>(c.d),
                    c.causal ? "causal" : "-", backward ? " +bwd" : "");
      std::snprintf(range, sizeof range, "%.2f [%.2f, %.2f]", median(ratio),
                    *std::min_element(ratio.begin(), ratio.end()),
                    *std::max_element(ratio.begin(), ratio.end()));
      std::printf("%-30s %9.3f %10.3f %20s %10.1f %11.1f\n", name, median(ms[1]), median(ms[0]), range,
                  mib[1], mib[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}
