// The strategies' device layouts: which devices the replicas run on, with how many threads and
// which cores, parsed from the options and asked of the backend registry (backend/devices.hpp:
// how many devices of a kind there are, whether they are emulated), never of a backend itself.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "core/env.hpp"
#include "distribute/worker_transport.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/distribute/strategy.hpp"

namespace lockstep::distribute {

int default_num_cpu_devices() {
  if (const auto n = env::integer("LOCKSTEP_CPU_DEVICES")) return static_cast<int>(*n);
  return std::min(backend::available_cores(), backend::default_cpu_threads());
}

namespace {
using Layout = StrategyLayout;

Layout cpu_layout(const std::vector<int>& indices, int num_devices, bool pin) {
  // LOCKSTEP_CPU_THREADS caps the cores that replicas share (as it caps the default device).
  std::vector<int> ids = backend::available_cpu_ids();
  ids.resize(std::min(ids.size(), static_cast<std::size_t>(backend::default_cpu_threads())));
  const int cores = static_cast<int>(ids.size());
  Layout l;
  const int n = static_cast<int>(indices.size());
  if (n > cores) {
    std::fprintf(stderr,
                 "WARNING: %d logical CPU devices share %d core(s): replicas will time-slice the cores, so steps "
                 "are slower than with %d devices\n",
                 n, cores, cores);
  }
  const int per = std::max(1, cores / std::max(1, num_devices));
  for (int i = 0; i < n; ++i) {
    const int idx = indices[static_cast<std::size_t>(i)];
    l.devices.push_back(Device{DeviceKind::kCpu, idx});
    l.threads.push_back(per);
    std::vector<int> mine;
    if (pin && num_devices <= cores) {
      for (int k = 0; k < per; ++k) mine.push_back(ids[static_cast<std::size_t>(idx * per + k)]);
    }
    l.cpus.push_back(std::move(mine));
  }
  return l;
}

// "gpu:0x4" -> four entries gpu:0; anything else as it is.
std::vector<std::string> expand_logical(const std::vector<std::string>& devices) {
  std::vector<std::string> out;
  for (const auto& s : devices) {
    const std::size_t x = s.rfind('x');
    const bool gpu = s.rfind("gpu:", 0) == 0 || s.rfind("GPU:", 0) == 0 || s.rfind("cuda:", 0) == 0;
    if (!gpu || x == std::string::npos || x < s.find(':')) {
      out.push_back(s);
      continue;
    }
    const std::string count = s.substr(x + 1);
    char* end = nullptr;
    const long n = std::strtol(count.c_str(), &end, 10);
    LOCKSTEP_CHECK(!count.empty() && *end == '\0' && n >= 1 && n <= 64, "device '", s,
                   "': logical devices on a GPU are written gpu:N xK with K in [1, 64], e.g. gpu:0x4");
    for (long i = 0; i < n; ++i) out.push_back(s.substr(0, x));
  }
  return out;
}

// Replicas on GPUs (devices of an accelerator kind): one thread each (the GPU computes). Replicas
// sharing a GPU enqueue on its one stream, so the shared-memory group's combine kernels see each
// other's tensors in order; replicas on distinct GPUs go through NCCL.
// The options every MirroredStrategy layout takes as they are, CPU or GPU (a GPU layout may then
// choose its own cross_device_ops).
void take_strategy_options(Layout& l, const MirroredOptions& o) {
  l.timeout = o.collective_timeout;
  l.cross_device_ops = o.cross_device_ops;
  l.bucket_cap_bytes = o.bucket_cap_bytes;
  l.shard_optimizer_update = o.shard_optimizer_update;
  l.overlap_gradients = o.overlap_gradients;
  l.gradients_in_place = o.gradients_in_place;
  l.check_mirrored = o.check_mirrored;
}

Layout gpu_layout(DeviceKind kind_of_gpus, const std::vector<int>& gpus, const MirroredOptions& o) {
  const backend::DeviceKindBackend& kind = backend::device_kind(kind_of_gpus);
  const int count = kind.count();
  for (int g : gpus) {
    LOCKSTEP_CHECK(g < count, "device 'gpu:", g, "' does not exist: this machine has ", count, " GPU(s)",
                   (count == 0 ? " (or lockstep was built without CUDA)" : ""));
  }
  LOCKSTEP_CHECK(kind.available(), "MirroredStrategy on GPUs: this lockstep was built "
                 "without CUDA (LOCKSTEP_WITH_CUDA=OFF)");
  std::vector<int> distinct;
  bool shared = false;
  for (int g : gpus) {
    if (std::find(distinct.begin(), distinct.end(), g) == distinct.end()) distinct.push_back(g);
    else shared = true;
  }
  Layout l;
  for (int g : gpus) {
    l.devices.push_back(Device{kind_of_gpus, g});
    l.threads.push_back(1);
    l.cpus.emplace_back();
  }
  take_strategy_options(l, o);
  l.memory_limit = o.gpu_memory_limit;
  if (distinct.size() > 1) {
    LOCKSTEP_CHECK(!shared, "MirroredStrategy: replicas on ", distinct.size(), " GPUs with some GPU holding several "
                   "(logical devices): NCCL needs one replica per GPU and replicas sharing a GPU reduce through its "
                   "memory; use one replica per GPU, or all replicas on one GPU");
    LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kLoopback, "MirroredStrategy: cross_device_ops "
                   "loopback works on one GPU only; replicas on several GPUs all-reduce over NCCL");
    // Emulated GPUs (LOCKSTEP_EMULATED_GPUS) have host memory and no NCCL: the shared-memory group
    // reduces them, so that the rest of a layout over several GPUs is tested without one.
    l.cross_device_ops =
        kind.emulated() ? CollectiveImplementation::kSharedMemory : CollectiveImplementation::kNccl;
  } else if (o.cross_device_ops == CollectiveImplementation::kNccl) {
    LOCKSTEP_CHECK(!shared, "MirroredStrategy: cross_device_ops nccl needs one replica per GPU (NCCL cannot have two "
                   "ranks on one GPU); replicas sharing a GPU use shared_memory");
  }
  return l;
}

bool cpu_devices_asked(const MirroredOptions& o) {
  return o.num_cpu_devices > 0 || env::is_set("LOCKSTEP_CPU_DEVICES");
}

// Said once per job: by the one process, or by worker 0 of several (multi_worker_layout).
void no_gpu_notice() {
  static std::once_flag notice;
  std::call_once(notice, [] {
    std::fprintf(stderr, "MirroredStrategy: no GPU visible; mirroring over the logical CPU devices\n");
  });
}

// `no_gpu`: where GPUs are built but none is visible and none was asked for, set instead of
// printing the notice (a worker of several prints it only if it is worker 0).
Layout mirrored_layout(const MirroredOptions& o, bool* no_gpu = nullptr) {
  LOCKSTEP_CHECK(o.num_cpu_devices >= 0 && o.num_cpu_devices <= kMaxCpuDevices, "MirroredStrategy: ",
                 o.num_cpu_devices, " logical CPU devices asked for; the count must be in [1, ", kMaxCpuDevices,
                 "] (0: the default)");
  LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kMpi,
                 "MirroredStrategy: cross_device_ops kMpi spans workers; use MultiWorkerMirroredStrategy");
  const int num_cpu = o.num_cpu_devices > 0 ? o.num_cpu_devices : default_num_cpu_devices();
  std::vector<int> cpu_indices;
  std::vector<int> gpu_indices;
  DeviceKind gpu_kind = DeviceKind::kCpu;  // the accelerator kind of gpu_indices
  // A GPU listed twice is refused as a CPU device is; several replicas on one GPU are written
  // gpu:NxK (logical devices), once.
  std::vector<Device> listed_gpus;
  for (const auto& s : o.devices) {
    const std::vector<std::string> one = expand_logical({s});
    const Device d = Device::parse(one.front());
    if (d.kind == DeviceKind::kCpu) continue;
    LOCKSTEP_CHECK(std::find(listed_gpus.begin(), listed_gpus.end(), d) == listed_gpus.end(), "device '", d.str(),
                   "' is listed twice; for several replicas on one GPU write it once as ", d.str(), "xK (K replicas)");
    listed_gpus.push_back(d);
  }
  for (const auto& s : expand_logical(o.devices)) {
    const Device d = Device::parse(s);
    if (d.kind == DeviceKind::kCpu) {
      LOCKSTEP_CHECK(d.index < num_cpu, "device '", s, "' does not exist: there are ", num_cpu,
                     " logical CPU devices (cpu:0 .. cpu:", num_cpu - 1, "; set num_cpu_devices or LOCKSTEP_CPU_DEVICES)");
      cpu_indices.push_back(d.index);
    } else {
      LOCKSTEP_CHECK(gpu_indices.empty() || d.kind == gpu_kind, "MirroredStrategy: devices mix kinds; mirror over one");
      gpu_kind = d.kind;
      gpu_indices.push_back(d.index);
    }
  }
  LOCKSTEP_CHECK(cpu_indices.empty() || gpu_indices.empty(), "MirroredStrategy: devices mix CPUs and GPUs; mirror over "
                 "one kind");
  if (o.devices.empty() && !cpu_devices_asked(o)) {
    // Every local GPU (TF's default: the first accelerator kind that has devices); the CPU
    // devices only when there is none.
    bool accelerator_built = false;
    for (DeviceKind kind : backend::device_kinds()) {
      const backend::DeviceKindBackend& gpu = backend::device_kind(kind);
      if (kind == DeviceKind::kCpu || !gpu.available()) continue;
      accelerator_built = true;
      if (!gpu_indices.empty()) continue;
      gpu_kind = kind;
      for (int g = 0; g < gpu.count(); ++g) gpu_indices.push_back(g);
    }
    if (gpu_indices.empty() && accelerator_built) {
      if (no_gpu)
        *no_gpu = true;
      else
        no_gpu_notice();
    }
  }
  if (!gpu_indices.empty()) return gpu_layout(gpu_kind, gpu_indices, o);
  LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kNccl,
                 "MirroredStrategy: cross_device_ops nccl is for GPU replicas; these are CPU devices");
  for (std::size_t i = 0; i < cpu_indices.size(); ++i)
    for (std::size_t j = i + 1; j < cpu_indices.size(); ++j)
      LOCKSTEP_CHECK(cpu_indices[i] != cpu_indices[j], "device 'cpu:", cpu_indices[i], "' is listed twice");
  if (cpu_indices.empty())
    for (int i = 0; i < num_cpu; ++i) cpu_indices.push_back(i);
  Layout l = cpu_layout(cpu_indices, num_cpu, o.pin_threads);
  take_strategy_options(l, o);
  return l;
}

Layout one_device_layout(const std::string& device) {
  const Device d = Device::parse(device);
  if (d.kind != DeviceKind::kCpu) {
    MirroredOptions o;
    return gpu_layout(d.kind, {d.index}, o);
  }
  Layout l;
  l.devices = {d};
  l.threads = {backend::default_cpu_threads()};
  l.cpus = {{}};
  return l;
}

Layout multi_worker_layout(const MultiWorkerOptions& o) {
  MirroredOptions local = o.local;
  local.cross_device_ops = CollectiveImplementation::kSharedMemory;
  bool no_gpu = false;
  Layout l = mirrored_layout(local, &no_gpu);
  const bool launched = launched_under_mpi();
  if (!launched || !built_with_mpi()) {
    if (no_gpu) no_gpu_notice();
    if (o.notice || launched)
      std::fprintf(stderr, "MultiWorkerMirroredStrategy: %s; training as MirroredStrategy on one worker\n",
                   launched ? "lockstep was built without MPI (LOCKSTEP_WITH_MPI=OFF)" : "not launched under MPI (mpirun)");
    return l;
  }
  // GPU replicas across workers: each worker's replicas on one GPU (one process per GPU, as
  // mpirun -np G runs it; or logical replicas gpu:KxN). They combine through that GPU's memory,
  // and across workers through host copies over MPI (MultiWorkerGroup stages device tensors);
  // NCCL across processes is not built, and replicas on several GPUs of one worker would need it.
  if (l.devices.front().kind != DeviceKind::kCpu) {
    for (const Device& d : l.devices)
      LOCKSTEP_CHECK(d == l.devices.front(), "MultiWorkerMirroredStrategy: this worker's replicas are on ",
                     l.devices.front().str(), " and ", d.str(), "; across workers each worker's replicas must share "
                     "one GPU (run one worker per GPU: --devices gpu:K), since NCCL across processes is not built");
  }
  WorkerTransport& world = WorkerTransport::world();
  l.num_workers = world.size();
  l.worker_index = world.rank();
  if (no_gpu && l.worker_index == 0) no_gpu_notice();
  l.cross_device_ops = CollectiveImplementation::kMpi;
  // The workers shard the optimizer update alike: one whose shard_optimizer_update says
  // no turns it off for all (else its all-reduce would meet the others' reduce-scatter at the
  // first step). A tag above the collective groups' (multi_worker_group.cpp: 1..32000).
  constexpr int kLayoutTag = 32500;
  const auto deadline = std::chrono::steady_clock::now() + local.collective_timeout;
  const WorkerTransport::Bytes mine{std::byte{l.shard_optimizer_update ? std::uint8_t{1} : std::uint8_t{0}}};
  for (const auto& theirs : world.all_to_all(kLayoutTag, mine, deadline, local.collective_timeout, "the strategy's set-up"))
    l.shard_optimizer_update = l.shard_optimizer_update && theirs.at(0) == std::byte{1};
  return l;
}
}  // namespace

MirroredStrategy::MirroredStrategy(const MirroredOptions& o) : Strategy(mirrored_layout(o)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerOptions& o) : Strategy(multi_worker_layout(o)) {}

OneDeviceStrategy::OneDeviceStrategy(const std::string& device) : Strategy(one_device_layout(device)) {}

}  // namespace lockstep::distribute
