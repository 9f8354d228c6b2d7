// How far apart the host puts this machine's first two CPUs, over time: two threads pinned to
// them pass a cache line back and forth, and every interval prints the one-way hand-off time
// (half a round trip). On the 2-vCPU AMD EPYC VM it reads about 30 ns when the vCPUs run on
// SMT siblings of one core (shared L1/L2) and 160-170 ns when they run on two cores, and it
// changes from one minute to the next: the "two speeds" of 2-replica runs (PERFORMANCE, Known
// limits) follow from copies between replicas paying that distance for every cache line.
//
//   core_handoff [--seconds S] [--interval-ms M] [--label]   (defaults 20 s, 500 ms)
// Prints one line per interval (seconds since start, median one-way ns of its samples), then
// how many intervals read below 80 ns ("near") and at or above ("far"). With --label it prints
// only "near" or "far", the placement most of the intervals read (far on a tie): what
// bench/ab_builds.sh -p and bench/compare_scaling.sh label their runs with.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

// Below this one-way time the two CPUs share a core's caches (26-30 ns measured); two cores read
// 158-173 ns.
constexpr double kNearNs = 80;

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int usage() {
  std::fprintf(stderr, "usage: core_handoff [--seconds S] [--interval-ms M] [--label]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20;
  int interval_ms = 500;
  bool label = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--label") {
      label = true;
      --i;  // no value
      continue;
    }
    if (i + 1 >= argc) return usage();
    if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (flag == "--interval-ms") interval_ms = std::atoi(argv[i + 1]);
    else return usage();
  }
  if (seconds <= 0 || interval_ms < 10) return usage();
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) {
    std::fprintf(stderr, "core_handoff: needs two CPUs, this process may use %zu\n", cpus.size());
    return 1;
  }
  // The line both threads write: odd values from the main thread, even ones from the echo thread.
  alignas(64) static std::atomic<std::uint64_t> line{0};
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    pin(cpus[1]);
    std::uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint64_t v = line.load(std::memory_order_acquire);
      if (v != seen && (v & 1)) {
        line.store(v + 1, std::memory_order_release);
        seen = v + 1;
      }
    }
  });
  pin(cpus[0]);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::uint64_t v = 0;
  int near = 0, far = 0;
  if (!label) std::printf("CPUs %d and %d; one-way hand-off, median of each interval's samples\n", cpus[0], cpus[1]);
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    std::vector<double> samples;
    const auto interval_end = Clock::now() + std::chrono::milliseconds(interval_ms);
    while (Clock::now() < interval_end) {
      constexpr int kTrips = 2000;  // one sample: 2,000 round trips
      const auto t0 = Clock::now();
      for (int i = 0; i < kTrips; ++i) {
        line.store(++v, std::memory_order_release);  // odd: the echo answers with v + 1
        while (line.load(std::memory_order_acquire) != v + 1) {
        }
        ++v;
      }
      samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kTrips / 2);
    }
    std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2), samples.end());
    const double median = samples[samples.size() / 2];
    (median < kNearNs ? near : far)++;
    if (label) continue;
    std::printf("%7.1f s  %6.0f ns\n", std::chrono::duration<double>(Clock::now() - start).count(), median);
    std::fflush(stdout);
  }
  stop.store(true);
  echo.join();
  if (label) std::printf("%s\n", near > far ? "near" : "far");
  else std::printf("intervals: %d near (< %.0f ns), %d far\n", near, kNearNs, far);
  return 0;
}
