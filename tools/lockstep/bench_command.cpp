// `lockstep bench allreduce`: in-process all-reduce bandwidth between N local devices, with
// the machine's memcpy bandwidth measured in the same run, in nccl-tests' terms:
// algbw = bytes / time, busbw = algbw * 2(N-1)/N. With --workers (under mpirun): our
// all-reduce across every worker's replicas against raw MPI_Allreduce of the same data.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "commands.hpp"
#include "core/env.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep::cli {

namespace {
using Clock = std::chrono::steady_clock;

std::string human(std::int64_t bytes) {
  char buf[32];
  if (bytes >= (1 << 20)) std::snprintf(buf, sizeof buf, "%lldMiB", static_cast<long long>(bytes >> 20));
  else std::snprintf(buf, sizeof buf, "%lldKiB", static_cast<long long>(bytes >> 10));
  return buf;
}

// Seconds per copy of `bytes`, best of several rounds (one thread, as one replica copies).
double memcpy_seconds(std::int64_t bytes) {
  std::vector<char> a(static_cast<std::size_t>(bytes), 1), b(static_cast<std::size_t>(bytes));
  double best = 1e30;
  const int reps = bytes >= (64 << 20) ? 3 : std::max(3, static_cast<int>((256LL << 20) / bytes));
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      std::memcpy(b.data(), a.data(), a.size());
      a[static_cast<std::size_t>(i) % a.size()] = b[0];  // keep the copies observable
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return best;
}

// Seconds per in-place sum all-reduce of `view` by this member, after a warm-up, from a barrier.
double all_reduce_seconds(distribute::Communicator& comm, Tensor& view, int iters) {
  for (int i = 0; i < 2; ++i) comm.all_reduce(view, distribute::ReduceOp::kSum)->wait();
  comm.barrier()->wait();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) comm.all_reduce(view, distribute::ReduceOp::kSum)->wait();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}
}  // namespace

void add_bench_command(CLI::App& app, BenchArgs& a) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* ar = bench->add_subcommand("allreduce", "All-reduce bus bandwidth between local devices vs memcpy bandwidth");
  ar->add_option("--devices", a.devices, "cpu:N for N logical CPU devices (default: every local device)");
  ar->add_option("--min-bytes", a.min_bytes, "Smallest buffer")->capture_default_str();
  ar->add_option("--max-bytes", a.max_bytes, "Largest buffer")->capture_default_str();
  ar->add_flag("--workers", a.workers,
               "Under mpirun: all-reduce across the workers (each with --devices) against raw MPI_Allreduce");
}

namespace {
int run_bench_allreduce_workers(const BenchArgs& a, const distribute::MirroredOptions& local) {
  constexpr int kRounds = 3;
  distribute::MultiWorkerMirroredStrategy strategy({.local = local, .notice = false});
  LOCKSTEP_CHECK(strategy.num_workers() > 1, "bench allreduce --workers runs under mpirun with 2 or more ranks "
                 "(mpirun -np 2 lockstep bench allreduce --workers)");
  const int n = strategy.num_replicas_in_sync();
  const int workers = strategy.num_workers();
  const bool chief = strategy.is_chief();
  const std::int64_t max_count = a.max_bytes / 4;
  auto buffers = strategy.run([&](distribute::ReplicaContext&) { return Tensor::full({max_count}, 1.0f); });
  if (chief) {
    const bool shm_off = !env::flag("LOCKSTEP_WORKER_SHM");
    std::printf("# lockstep bench allreduce --workers: %d workers x %d replicas (%s); ours: in-process "
                "reduce-scatter, then across workers %s, local copy-out; raw: MPI_Allreduce (in place, float32 "
                "sum) across the %d ranks\n",
                workers, strategy.num_local_replicas(), strategy.devices()[0].str().c_str(),
                shm_off ? "reduce-scatter + all-gather over MPI point-to-point (LOCKSTEP_WORKER_SHM=0)"
                        : "in lockstep's shared-memory segment when every worker runs on this machine and the "
                          "buffer fits a 4 MiB slot, else reduce-scatter + all-gather over MPI point-to-point",
                workers);
    std::printf("# busbw = algbw * 2(P-1)/P, P = %d replicas for ours, %d ranks for MPI; each time: the slowest "
                "worker's mean, best of %d interleaved rounds\n", n, workers, kRounds);
    std::printf("%10s %12s %12s %12s %12s %12s %10s\n", "size", "count(f32)", "ours(us)", "ours_busbw", "mpi(us)",
                "mpi_busbw", "ours/mpi");
  }
  for (std::int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 2) {
    const std::int64_t count = bytes / 4;
    const int iters = static_cast<int>(std::max<std::int64_t>(5, std::min<std::int64_t>(1000, (256LL << 20) / bytes)));
    // Interleaved rounds, best of each: memory bandwidth on a shared host drifts between runs,
    // and one drift must not land on one side of the ratio only.
    double ours = 1e300, raw = 1e300;
    for (int round = 0; round < kRounds; ++round) {
      auto times = strategy.run([&](distribute::ReplicaContext& ctx) {
        Tensor view = buffers[static_cast<std::size_t>(ctx.local_replica_id())].slice(0, count);
        return Tensor::full({1}, all_reduce_seconds(ctx.communicator(), view, iters));
      });
      ours = std::min(ours, static_cast<double>(strategy.reduce(distribute::ReduceOp::kMax, times).item()));
      raw = std::min(raw, distribute::time_raw_mpi_all_reduce(buffers[0].slice(0, count), iters));
    }
    const double ours_bus = static_cast<double>(bytes) / ours / 1e9 * 2.0 * (n - 1) / n;
    const double raw_bus = static_cast<double>(bytes) / raw / 1e9 * 2.0 * (workers - 1) / workers;
    if (chief) {
      std::printf("%10s %12lld %12.1f %12.2f %12.1f %12.2f %9.0f%%\n", human(bytes).c_str(),
                  static_cast<long long>(count), ours * 1e6, ours_bus, raw * 1e6, raw_bus, 100.0 * ours_bus / raw_bus);
      std::fflush(stdout);
    }
  }
  if (chief)
    std::printf("# PyTorch gloo on the same sizes: python3 bench/allreduce_gloo.py --workers %d --min-bytes %lld "
                "--max-bytes %lld\n", workers, static_cast<long long>(a.min_bytes), static_cast<long long>(a.max_bytes));
  return 0;
}
}  // namespace

int run_bench_allreduce(const BenchArgs& a) {
  distribute::MirroredOptions o;
  if (!a.devices.empty()) {
    const Device d = Device::parse(a.devices);
    LOCKSTEP_CHECK(d.kind == DeviceKind::kCpu && d.index >= 1 && d.index <= distribute::kMaxCpuDevices,
                   "--devices must be cpu:N with N in [1, ", distribute::kMaxCpuDevices, "], got '", a.devices, "'");
    o.num_cpu_devices = d.index;
  }
  LOCKSTEP_CHECK(a.min_bytes >= 4 && a.min_bytes <= a.max_bytes, "--min-bytes must be in [4, --max-bytes]");
  if (a.workers) return run_bench_allreduce_workers(a, o);
  distribute::MirroredStrategy strategy(o);
  const int n = strategy.num_replicas_in_sync();
  const std::int64_t max_count = a.max_bytes / 4;
  // Each replica's buffer lives on its own device (allocated by its own thread).
  auto buffers = strategy.run([&](distribute::ReplicaContext&) { return Tensor::full({max_count}, 1.0f); });
  const double big_copy = memcpy_seconds(std::min<std::int64_t>(a.max_bytes, 256LL << 20));
  const double memcpy_bw = static_cast<double>(std::min<std::int64_t>(a.max_bytes, 256LL << 20)) / big_copy / 1e9;
  std::printf("# lockstep bench allreduce: %d replicas (%s), algorithm: in-process reduce-scatter + all-gather\n", n,
              strategy.devices()[0].str().c_str());
  std::printf("# memcpy bandwidth (one thread, %s): %.2f GB/s\n",
              human(std::min<std::int64_t>(a.max_bytes, 256LL << 20)).c_str(), memcpy_bw);
  std::printf("%10s %12s %10s %12s %12s %14s\n", "size", "count(f32)", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
              "busbw/memcpy");
  for (std::int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 2) {
    const std::int64_t count = bytes / 4;
    const int iters = static_cast<int>(std::max<std::int64_t>(5, std::min<std::int64_t>(2000, (512LL << 20) / bytes)));
    auto times = strategy.run([&](distribute::ReplicaContext& ctx) {
      Tensor view = buffers[static_cast<std::size_t>(ctx.local_replica_id())].slice(0, count);
      return all_reduce_seconds(ctx.communicator(), view, iters);
    });
    double t = 0;
    for (double v : times.values()) t = std::max(t, v);
    const double algbw = static_cast<double>(bytes) / t / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    std::printf("%10s %12lld %10.1f %12.2f %12.2f %13.0f%%\n", human(bytes).c_str(), static_cast<long long>(count),
                t * 1e6, algbw, busbw, 100.0 * busbw / memcpy_bw);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace lockstep::cli
