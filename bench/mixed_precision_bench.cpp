// Mixed precision on a deep MLP (default 8 x Dense(2048, relu) -> Dense(10, softmax), batch 256,
// Adam): training steps/s and peak memory per device under float32, mixed_bfloat16 and
// mixed_float16, in one process, interleaved rounds, best round of each.
//   mixed_precision_bench [--units U] [--layers L] [--batch B] [--steps S] [--rounds R] [--devices N]
//                         [--policy P]   (P: run only this policy, e.g. to profile it)
// "step memory" is the peak over a step minus what was held before it (weights, optimizer
// slots): activations, gradients and the 16-bit copies of the weights that the layers read;
// "activation memory" is what a forward pass under a tape holds, less those 16-bit copies.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/lockstep.hpp>
#include <lockstep/tensor/compute_context.hpp>

using namespace lockstep;

namespace {
struct Args {
  std::int64_t units = 2048, layers = 8, batch = 256;
  int steps = 30, rounds = 3, devices = 1;
  std::string policy;  // empty: all three
};

struct Result {
  double steps_per_second = 0;
  double peak_mib = 0;
  double step_mib = 0;
  double activation_mib = 0;
  double loss = 0;
};

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

Result run(const std::string& policy, const Args& a, distribute::Strategy& strategy, const Tensor& x, const Tensor& y) {
  mixed_precision::set_global_policy(policy);
  set_random_seed(1);
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    std::vector<layers::LayerPtr> ls{layers::Dense(a.units, "relu", a.units)};
    for (std::int64_t i = 1; i < a.layers; ++i) ls.push_back(layers::Dense(a.units, "relu"));
    ls.push_back(layers::Dense(10, "softmax"));
    model = std::make_unique<Sequential>(ls);
    model->compile(optimizers::Adam(1e-4), losses::SparseCategoricalCrossentropy());
  }
  mixed_precision::set_global_policy("float32");
  for (int i = 0; i < 3; ++i) model->train_step(x, y);  // warm-up: slots, caches, oneDNN kernels
  std::uint64_t before = 0;
  for (auto* c : strategy.contexts()) {
    reset_context_peak_bytes(*c);
    before = std::max(before, context_bytes_in_use(*c));
  }
  Result r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) r.loss = model->train_step(x, y);
  r.steps_per_second = a.steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::uint64_t peak = 0;
  for (auto* c : strategy.contexts()) peak = std::max(peak, context_peak_bytes(*c));
  r.peak_mib = mib(peak);
  r.step_mib = mib(peak - std::min(peak, before));
  // Activation memory: what a training forward pass under a tape holds on the device (the tape
  // keeps what backward needs), less the 16-bit copies of the weights that the layers read.
  ComputeContext& device = strategy.context(0);
  const ComputeScope on_device(device);
  reset_context_peak_bytes(device);
  const std::uint64_t held = context_bytes_in_use(device);
  {
    GradientTape tape;
    const auto out = model->forward(x, layers::CallContext{.training = true, .seed = 1});
    (void)sum(model->loss()->per_example(y, out.output, out.logits));
  }
  const std::uint64_t forward = context_peak_bytes(device) - std::min(context_peak_bytes(device), held);
  const std::uint64_t copies = policy == "float32" ? 0 : static_cast<std::uint64_t>(model->count_params()) * 2;
  r.activation_mib = mib(forward - std::min(forward, copies));
  return r;
}
}  // namespace

int main(int argc, char** argv) try {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--policy") {
      a.policy = argv[i + 1];
      continue;
    }
    const long long v = std::atoll(argv[i + 1]);
    if (k == "--units") a.units = v;
    else if (k == "--layers") a.layers = v;
    else if (k == "--batch") a.batch = v;
    else if (k == "--steps") a.steps = static_cast<int>(v);
    else if (k == "--rounds") a.rounds = static_cast<int>(v);
    else if (k == "--devices") a.devices = static_cast<int>(v);
    else throw ValueError("unknown flag " + k + " (--units --layers --batch --steps --rounds --devices --policy)");
  }
  LOCKSTEP_CHECK(a.units > 0 && a.layers > 0 && a.batch > 0 && a.steps > 0 && a.rounds > 0 && a.devices > 0,
                 "every flag must be positive");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> xv(static_cast<std::size_t>(a.batch * a.units));
  for (auto& v : xv) v = normal(rng);
  std::vector<std::int64_t> yv(static_cast<std::size_t>(a.batch));
  for (auto& v : yv) v = static_cast<std::int64_t>(rng() % 10);
  const Tensor x = Tensor::from_vector(xv, {a.batch, a.units});
  const Tensor y = Tensor::from_vector(yv, {a.batch});
  distribute::MirroredStrategy strategy({.num_cpu_devices = a.devices});
  std::vector<std::string> policies{"float32", "mixed_bfloat16", "mixed_float16"};
  if (!a.policy.empty()) {
    LOCKSTEP_CHECK(a.policy == "float32" || a.policy == "mixed_bfloat16" || a.policy == "mixed_float16",
                   "--policy must be float32, mixed_bfloat16 or mixed_float16, not '" + a.policy + "'");
    policies = {a.policy};
  }
  std::map<std::string, Result> best;
  for (int round = 0; round < a.rounds; ++round)
    for (const std::string& p : policies) {
      const Result r = run(p, a, strategy, x, y);
      if (r.steps_per_second > best[p].steps_per_second) best[p] = r;
    }
  std::printf("deep MLP %lld x Dense(%lld, relu) -> Dense(10, softmax), batch %lld, Adam, %d device(s), %d steps x %d "
              "rounds (best)\n",
              static_cast<long long>(a.layers), static_cast<long long>(a.units), static_cast<long long>(a.batch),
              a.devices, a.steps, a.rounds);
  const char* bf16 = std::getenv("LOCKSTEP_BF16_GEMM");
  std::printf("bf16 GEMM: %s\n", bf16 ? bf16 : "auto (oneDNN where the CPU has AVX512_BF16)");
  std::printf("%-16s %10s %12s %12s %12s %10s %10s\n", "policy", "steps/s", "peak MiB", "step MiB", "activ. MiB",
              "x float32", "last loss");
  const Result& base = best["float32"];
  for (const std::string& p : policies) {
    const Result& r = best[p];
    std::printf("%-16s %10.2f %12.1f %12.1f %12.1f %10.2f %10.4f\n", p.c_str(), r.steps_per_second, r.peak_mib, r.step_mib,
                r.activation_mib, base.steps_per_second > 0 ? r.steps_per_second / base.steps_per_second : 0.0, r.loss);
  }
  const auto ratio = [&](const char* p) {
    return base.activation_mib > 0 && best.count(p) ? best[p].activation_mib / base.activation_mib : 0.0;
  };
  std::printf("activation memory vs float32: mixed_bfloat16 %.2f x, mixed_float16 %.2f x\n", ratio("mixed_bfloat16"),
              ratio("mixed_float16"));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mixed_precision_bench: %s\n", e.what());
  return 1;
}
