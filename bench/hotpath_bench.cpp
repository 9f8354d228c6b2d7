// The host's cost of each launch and call on the eager and replay paths (issue 37: at 100-200 us
// a step every microsecond a launch or call costs the host counts, and with logical replicas'
// threads a process-wide lock per launch serializes them). Per call, in host nanoseconds, on each
// replica's thread of a strategy over DEVICES (run at once on every replica, as a step's ops are):
//   error_site       the id of a device check's site (each launch of mark_outside takes one)
//   note_launch      the count of one kernel launch (every kernel of every op)
//   device_constant  a kept constant found again (concatenate, zero_pad2d, PositionEmbedding,
//                    RepeatVector, the causal mask: each call)
//   zero_pad2d       the op on a kept index constant of 64x28x28 rows (MNIST-sized): the constant
//                    and the gather's check of its indices (emulated GPUs run the kernel on the host);
//                    then the host's range scans of kept index bytes per call (0: checked once)
//   read             a 4-byte read to the host (raises the device checks' marks it waited for)
// Each figure is the median over ROUNDS of the mean over replicas of a replica's mean over CALLS.
// Emulated GPUs (LOCKSTEP_EMULATED_GPUS=1) run gpu:0 and gpu:0x4 without one.
//   hotpath_bench [--calls N] [--rounds K]   (defaults 20000, 7)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <lockstep/lockstep.hpp>

#include "backend/context.hpp"
#include "backend/error_marks.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "median.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/kernel_launches.hpp"

using namespace lockstep;

namespace {

struct Probe {
  const char* name;
  int calls_divisor;  // an op costs far more than a count: fewer calls
  std::function<void(int replica, int calls)> run;  // on a replica's thread
};

volatile std::int64_t g_sink = 0;

Tensor kept_rows(std::int64_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
  return Tensor::from_vector(v, {n});
}

std::vector<Probe> probes(std::vector<Tensor>& images, std::vector<Tensor>& scalars) {
  return {
      {"error_site", 1,
       [](int, int calls) {
         for (int i = 0; i < calls; ++i) g_sink = g_sink + backend::error_site("gather_rows");
       }},
      {"note_launch", 1,
       [](int, int calls) {
         const Device d = backend::current_context().device();
         for (int i = 0; i < calls; ++i) detail::note_kernel_launch(d, backend::KernelOp::kFill);
       }},
      {"device_constant", 4,
       [](int, int calls) {
         const std::int64_t h = 28, w = 28;
         for (int i = 0; i < calls; ++i)
           g_sink = g_sink + device_constant({"hotpath_bench rows: h, w", {h, w}}, 64, [](std::int64_t r) { return kept_rows(r); }).dim(0);
       }},
      {"zero_pad2d", 200,
       [&images](int replica, int calls) {
         const Tensor& x = images[static_cast<std::size_t>(replica)];
         for (int i = 0; i < calls; ++i) g_sink = g_sink + zero_pad2d(x, Padding2d{1, 1, 1, 1}).dim(1);
       }},
      {"read", 20,
       [&scalars](int replica, int calls) {
         const Tensor& s = scalars[static_cast<std::size_t>(replica)];
         float v = 0;
         for (int i = 0; i < calls; ++i) s.copy_to_host(&v, sizeof v);
         g_sink = g_sink + static_cast<std::int64_t>(v);
       }},
  };
}

void bench(const char* devices, int calls, int rounds) {
  std::unique_ptr<distribute::MirroredStrategy> strategy;
  try {
    strategy = std::make_unique<distribute::MirroredStrategy>(
        std::string(devices) == "cpu" ? distribute::MirroredOptions{.num_cpu_devices = 1}
                                      : distribute::MirroredOptions{.devices = {devices}});
  } catch (const std::exception& e) {
    std::printf("%-8s skipped: %s\n", devices, e.what());
    return;
  }
  const int n = strategy->num_local_replicas();
  std::vector<Tensor> images(static_cast<std::size_t>(n)), scalars(static_cast<std::size_t>(n));
  strategy->run_void([&](distribute::ReplicaContext& r) {
    images[static_cast<std::size_t>(r.local_replica_id())] = Tensor::ones(Shape{64, 28, 28, 1});
    scalars[static_cast<std::size_t>(r.local_replica_id())] = Tensor::ones(Shape{1});
  });
  for (const Probe& p : probes(images, scalars)) {
    const int m = std::max(1, calls / p.calls_divisor);
    std::vector<double> per_round;
    for (int round = 0; round <= rounds; ++round) {  // round 0 warms up (builds the constants)
      std::vector<double> ns(static_cast<std::size_t>(n));
      strategy->run_void([&](distribute::ReplicaContext& r) {
        const auto start = std::chrono::steady_clock::now();
        p.run(r.local_replica_id(), m);
        const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
        ns[static_cast<std::size_t>(r.local_replica_id())] = took.count() / m;
      });
      double mean = 0;
      for (double v : ns) mean += v / n;
      if (round > 0) per_round.push_back(mean);
    }
    std::printf("%-8s %-16s %10.1f ns/call\n", devices, p.name, median(per_round));
    if (std::strcmp(p.name, "zero_pad2d") == 0) {  // the host's range checks of its kept index
      const std::uint64_t scans = detail::host_copy_scans();
      strategy->run_void([&](distribute::ReplicaContext& r) { p.run(r.local_replica_id(), m); });
      std::printf("%-8s %-16s %10.2f host range scans/call\n", devices, p.name,
                  static_cast<double>(detail::host_copy_scans() - scans) / (m * n));
    }
  }
}

int usage() {
  std::fprintf(stderr, "usage: hotpath_bench [--calls N] [--rounds K]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  int calls = 20000, rounds = 7;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 == argc) return usage();
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[++i]);
    else return usage();
  }
  if (calls < 1 || rounds < 1) return usage();
  for (const char* devices : {"cpu", "gpu:0", "gpu:0x4"}) bench(devices, calls, rounds);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "hotpath_bench: %s\n", e.what());
  return 1;
}
