// fit's host cost per step (issue 37.1: `lockstep train --devices gpu:0` at >= 90% of its own bare
// step): what `fit` adds to each step over bare Model::train_step, on the CPU device and on gpu:0
// (captured: jit_compile "auto" replays the step), at steps_per_execution 1 and 8. On a GPU whose
// captured step takes tens of microseconds every microsecond of host work per step counts, and
// the host's part can be measured without one: on emulated GPUs (LOCKSTEP_EMULATED_GPUS=1) a
// replay runs the recorded CPU kernels on the calling thread, so what fit adds there is host work
// (input gather, the copy to the device and its cast, callbacks, logs, allocations, hand-offs).
//   bare   train_step on batches already on the device (gpu_bench's "mlp" figure; reads the loss
//          each step)
//   fit    what `lockstep train` runs: MNIST's uint8 pixels from host memory, cast_and_scale(1/255),
//          shuffle over the whole set, batch, prefetch, repeat; TerminateOnNaN; verbose 0; one
//          epoch of STEPS steps. Its callbacks are async-safe, as lockstep train's, so fit reads
//          the steps' numbers once per 16 steps (FitLoop::kMaxPendingSteps)
//   fit, read each  (--read-each 1) fit/1 with each step's numbers read at its end
//          (FitOptions::defer_reads false: a wait for the device per step)
// Each segment is timed after its first 5% of steps (fit's warm-up rule): wall time, the
// process's CPU time (every thread: what the host spends, which a shared machine's load does not
// inflate as it does wall time) and heap allocations (operator new, every thread), per step.
// Each round runs every segment once, in an order that turns from round to round; the figures
// are medians over the rounds of per-round differences and ratios against the same round's bare
// segment on the same device, with their range.
//
//   fit_host_cost [--model tiny|flagship] [--batch G] [--steps N] [--rounds K] [--only S] [--gather-ahead 0|1]
//                 [--staging 0|1] [--read-each 0|1]
//     defaults: tiny (Dense(10, softmax) on the 784 pixels: the host's share is largest), batch
//     64, 2000 steps per segment, 9 rounds. gpu:0 is left out where no GPU (real or emulated) is.
//     --only S runs segment S alone, K times, and prints nothing else (for a profiler: perf record):
//     0-2 the CPU's bare, fit/1, fit/8; 3-5 gpu:0's (with --read-each 1: 0-3 and 4-7, fit/1 read
//     each third). --gather-ahead 0: gpu:0's fit segments run
//     with FitOptions::gather_ahead false (the replica's thread gathers each next batch itself;
//     interleave runs with 0 and 1 to compare). --staging 0: gpu:0's fit segments gather the rows
//     into host memory and copy them into the staging blocks (FitOptions::gather_into_staging
//     false), the copy that gathering into the blocks saves. --read-each 1 adds the "fit/1, read
//     each" segment per device: its wall time against fit/1's is what deferred reads save (on
//     emulated GPUs, which compute on the calling thread, little: the wait is for the host itself).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/lockstep.hpp>

#include "backend/devices.hpp"
#include "flagship.hpp"
#include "median.hpp"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

// Every heap allocation of the process through operator new (the array, nothrow and sized forms
// of libstdc++ come here too), counted.
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow form too: a sanitizer's runtime replaces libstdc++'s (which would come above) with
// its own, whose memory the delete above must not free.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

using namespace lockstep;

namespace {

std::string machine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, cpu = "unknown CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return cpu + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores";
}

int usage() {
  std::fprintf(stderr, "usage: fit_host_cost [--model tiny|flagship] [--batch G] [--steps N] [--rounds K] [--only S] "
                       "[--gather-ahead 0|1] [--staging 0|1] [--read-each 0|1]\n");
  return 2;
}

std::unique_ptr<Sequential> make_model(const std::string& which, distribute::Strategy& strategy) {
  if (which == "flagship") return make_flagship(&strategy);
  set_random_seed(1);
  auto scope = strategy.scope();
  auto model = std::make_unique<Sequential>();
  model->add(layers::Dense(10, "softmax", 784));
  model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return model;
}

// Wall seconds, process CPU seconds, allocations and voluntary context switches (a thread that
// waits for another and sleeps) at one instant.
struct Mark {
  double wall = 0, cpu = 0;
  std::uint64_t allocations = 0;
  long switches = 0;
  static Mark now() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    rusage use{};
    getrusage(RUSAGE_SELF, &use);
    return {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
            static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec), g_allocations.load(),
            use.ru_nvcsw};
  }
};

// Per step between two marks `steps` apart.
struct PerStep {
  double rate = 0, cpu_us = 0, allocations = 0, switches = 0;
  PerStep(const Mark& a, const Mark& b, std::int64_t steps) {
    const auto n = static_cast<double>(steps);
    rate = n / (b.wall - a.wall);
    cpu_us = 1e6 * (b.cpu - a.cpu) / n;
    allocations = static_cast<double>(b.allocations - a.allocations) / n;
    switches = static_cast<double>(b.switches - a.switches) / n;
  }
};

// Marks fit's first batch at or after `from` (its begin) and its last (its end): with
// steps_per_execution N the callbacks see every N-th batch. Async-safe, as lockstep train's
// callbacks are: the last batch's end comes after fit's last read, which waits for the device.
class Marks final : public Callback {
 public:
  explicit Marks(std::int64_t from) : from_(from) {}
  bool async_safe() const override { return true; }
  void on_train_batch_begin(std::int64_t batch, const Logs&) override {
    if (batch >= from_ && first_ < 0) start_ = Mark::now(), first_ = batch;
  }
  void on_train_batch_end(std::int64_t batch, const Logs&) override {
    if (first_ >= 0) end_ = Mark::now(), last_ = batch;
  }
  PerStep per_step() const {
    LOCKSTEP_CHECK(first_ >= 0 && last_ >= first_, "fit_host_cost: fit ended before its timed part");
    return PerStep(start_, end_, last_ - first_ + 1);
  }

 private:
  std::int64_t from_, first_ = -1, last_ = -1;
  Mark start_, end_;
};

// One device's model and its bare batches (on the device).
struct Setup {
  std::string name;
  std::unique_ptr<distribute::Strategy> strategy;
  std::unique_ptr<Sequential> model;
  std::vector<Tensor> xs, ys;
};

struct Segment {
  Setup* setup;
  std::int64_t per_execution;  // 0: bare
  bool read_each;              // FitOptions::defer_reads false
  std::size_t bare;            // the index of the same device's bare segment
  std::vector<double> rates, cpu_us, allocations, switches, ratio, wall_added, cpu_added;
};

std::string range(const std::vector<double>& v, const char* format) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char out[96];
  const std::string f = std::string(format) + " [" + format + ", " + format + "]";
  std::snprintf(out, sizeof out, f.c_str(), median(v), *lo, *hi);
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  int steps = 2000, rounds = 9, only = -1;
  bool gpu_gather_ahead = true;
  bool gpu_staging = true;
  bool read_each = false;
  std::int64_t batch = 64;
  std::string model_name = "tiny";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string value = argv[i + 1];
    if (flag == "--model") model_name = value;
    else if (flag == "--batch") batch = std::atoll(value.c_str());
    else if (flag == "--steps") steps = std::atoi(value.c_str());
    else if (flag == "--rounds") rounds = std::atoi(value.c_str());
    else if (flag == "--only") only = std::atoi(value.c_str());
    else if (flag == "--gather-ahead") gpu_gather_ahead = value != "0";
    else if (flag == "--staging") gpu_staging = value != "0";
    else if (flag == "--read-each") read_each = value != "0";
    else return usage();
  }
  if ((model_name != "tiny" && model_name != "flagship") || batch < 1 || steps < 40 || rounds < 1) return usage();

  auto [train, test] = datasets::mnist::load_data();
  const Tensor x_bytes = flatten_images_for(train.x, /*model_rescales=*/true);  // uint8, as stored
  const Tensor& y = train.y;
  LOCKSTEP_CHECK(x_bytes.dim(0) >= 8 * batch, "fit_host_cost: batch ", batch, " is too large for ", x_bytes.dim(0),
                 " examples");
  // What lockstep train reads (train_command.cpp): the pixels as bytes, cast as each batch is gathered.
  const data::Dataset dataset =
      image_slices(x_bytes, y, false).shuffle(x_bytes.dim(0), 7).batch(batch).prefetch(data::kAutotune).repeat();

  std::vector<Setup> setups;
  setups.push_back({"cpu", std::make_unique<distribute::MirroredStrategy>(distribute::MirroredOptions{.num_cpu_devices = 1}), {}, {}, {}});
  const bool gpu = backend::device_kind(DeviceKind::kCuda).count() > 0;
  if (gpu)
    setups.push_back({"gpu:0", std::make_unique<distribute::MirroredStrategy>(distribute::MirroredOptions{.devices = {"gpu:0"}}), {}, {}, {}});
  for (Setup& s : setups) {
    s.model = make_model(model_name, *s.strategy);
    const Device device = context_device(s.strategy->context(0));
    for (std::int64_t b = 0; b < 8; ++b) {
      const Tensor xb = flatten_and_scale_images(x_bytes.slice(b * batch, (b + 1) * batch));  // fit's floats
      ComputeScope on(s.strategy->context(0));
      s.xs.push_back(xb.to(device));
      s.ys.push_back(y.slice(b * batch, (b + 1) * batch).to(device));
    }
  }

  const int warmup = std::max(2, steps / 20);
  const auto bare = [&](Setup& s) {
    Mark start;
    for (int i = 0; i < steps; ++i) {
      if (i == warmup) start = Mark::now();
      (void)s.model->train_step(s.xs[static_cast<std::size_t>(i % 8)], s.ys[static_cast<std::size_t>(i % 8)]);
    }
    return PerStep(start, Mark::now(), steps - warmup);
  };
  const auto fit = [&](Setup& s, std::int64_t per_execution, bool read_each_step) {
    s.model->set_steps_per_execution(per_execution);
    const auto marks = std::make_shared<Marks>(warmup);
    FitOptions o{.epochs = 1, .steps_per_epoch = steps, .verbose = 0};
    o.gather_ahead = gpu_gather_ahead || s.name == "cpu";
    o.gather_into_staging = gpu_staging;
    o.defer_reads = !read_each_step;
    o.callbacks = {std::make_shared<TerminateOnNaN>(), marks};
    s.model->fit(dataset, o);
    return marks->per_step();
  };

  std::vector<Segment> segments;
  for (Setup& s : setups) {
    const std::size_t base = segments.size();
    for (std::int64_t n : {0, 1, 8}) segments.push_back({&s, n, false, base, {}, {}, {}, {}, {}, {}, {}});
    if (read_each) segments.insert(segments.begin() + static_cast<std::ptrdiff_t>(base) + 2,
                                   Segment{&s, 1, true, base, {}, {}, {}, {}, {}, {}, {}});
  }
  const auto run = [&](Segment& g) {
    return g.per_execution ? fit(*g.setup, g.per_execution, g.read_each) : bare(*g.setup);
  };
  for (Setup& s : setups) (void)fit(s, 1, false), (void)bare(s);  // compiled, captured, caches warm
  if (only >= 0) {
    LOCKSTEP_CHECK(static_cast<std::size_t>(only) < segments.size(), "fit_host_cost: --only ", only, " is not a segment");
    for (int r = 0; r < rounds; ++r) (void)run(segments[static_cast<std::size_t>(only)]);
    return 0;
  }

  for (int r = 0; r < rounds; ++r) {
    std::vector<PerStep> got(segments.size(), PerStep(Mark(), Mark(), 1));
    for (std::size_t k = 0; k < segments.size(); ++k) {
      const std::size_t m = (static_cast<std::size_t>(r) + k) % segments.size();
      got[m] = run(segments[m]);
    }
    std::fprintf(stderr, "round %2d (steps/s, CPU us/step):", r + 1);
    for (std::size_t m = 0; m < segments.size(); ++m) {
      Segment& g = segments[m];
      const PerStep& base = got[g.bare];  // the bare segment of the same device
      g.rates.push_back(got[m].rate);
      g.cpu_us.push_back(got[m].cpu_us);
      g.allocations.push_back(got[m].allocations);
      g.switches.push_back(got[m].switches);
      g.ratio.push_back(got[m].rate / base.rate);
      g.wall_added.push_back(1e6 / got[m].rate - 1e6 / base.rate);
      g.cpu_added.push_back(got[m].cpu_us - base.cpu_us);
      std::fprintf(stderr, "  %s %s%s %.0f %.1f", g.setup->name.c_str(),
                   g.per_execution ? ("fit/" + std::to_string(g.per_execution)).c_str() : "bare",
                   g.read_each ? " read each" : "", got[m].rate, got[m].cpu_us);
    }
    std::fprintf(stderr, "\n");
  }

  std::printf("fit_host_cost: %s model, global batch %lld, %d rounds of %d steps per segment (medians [min, max])\n",
              model_name.c_str(), static_cast<long long>(batch), rounds, steps);
  std::printf("machine: %s; gpu:0: %s\n", machine().c_str(),
              gpu ? backend::list_local_devices().front().description.c_str()
                  : "none (LOCKSTEP_EMULATED_GPUS=1 gives an emulated one)");
  std::printf("  %-6s %-22s %8s %8s %7s %6s %22s %24s %24s\n", "device", "mode", "steps/s", "CPU us", "allocs",
              "waits", "fit/bare steps/s", "wall us added", "CPU us added");
  for (Segment& g : segments) {
    const std::string mode = !g.per_execution ? std::string("bare")
                             : "fit, spe " + std::to_string(g.per_execution) + (g.read_each ? ", read each" : "");
    std::printf("  %-6s %-22s %8.0f %8.1f %7.1f %6.2f %22s %24s %24s\n", g.setup->name.c_str(), mode.c_str(),
                median(g.rates), median(g.cpu_us), median(g.allocations), median(g.switches), g.per_execution ? range(g.ratio, "%.3f").c_str() : "",
                g.per_execution ? range(g.wall_added, "%.1f").c_str() : "",
                g.per_execution ? range(g.cpu_added, "%.1f").c_str() : "");
  }
  std::printf("  (spe: steps_per_execution; CPU us: the process's CPU time per step, every thread; allocs: operator new\n"
              "   calls per step; waits: voluntary context switches per step (a thread slept waiting for another); added: fit's per step minus the bare step's, per round. Issue 37.1's goal is fit/bare\n"
              "   >= 0.90 on an H200 at batch 64 and 1024)\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fit_host_cost: %s\n", e.what());
  return 1;
}
