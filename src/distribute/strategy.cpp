#include "lockstep/distribute/strategy.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "backend/kernels.hpp"
#include "backend/thread_pool.hpp"
#include "core/env.hpp"
#include "distribute/device_layout.hpp"
#include "distribute/replica_threads.hpp"
#include "distribute/worker_transport.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

namespace {
thread_local Strategy* t_current_strategy = nullptr;

// False when the environment variable is set to 0.
bool env_flag_not_zero(const char* name) {
  return env::flag(name);
}

}  // namespace

// MirroredOptions::shard_optimizer_update, unless $LOCKSTEP_SHARD_UPDATE is 0.
bool shard_update_wanted(bool option) { return option && env_flag_not_zero("LOCKSTEP_SHARD_UPDATE"); }

Strategy::Strategy(StrategyLayout layout)
    : devices_(std::move(layout.devices)),
      num_workers_(layout.num_workers),
      worker_index_(layout.worker_index),
      replicas_(std::make_unique<Replicas>()) {
  const auto& threads = layout.threads;
  const auto& cpus = layout.cpus;
  const int n = static_cast<int>(devices_.size());
  LOCKSTEP_CHECK(n >= 1, "a strategy needs at least one device");
  for (int r = 0; r < n; ++r) {
    contexts_.push_back(make_compute_context(devices_[static_cast<std::size_t>(r)], threads[static_cast<std::size_t>(r)],
                                             cpus[static_cast<std::size_t>(r)], layout.memory_limit));
    context_ptrs_.push_back(contexts_.back().get());
  }
  group_ = make_collective_group(layout.cross_device_ops, n, {.timeout = layout.timeout, .devices = devices_});
  ShardedUpdateOptions update{.num_local_replicas = n,
                              .num_workers = num_workers_,
                              .worker_index = worker_index_,
                              .bucket_cap_bytes = layout.bucket_cap_bytes};
  // Sharding needs every copy of a variable in host memory: each replica writes its updated
  // shard into this process's other copies (one worker) or all-gathers the shards (several).
  bool all_cpu = true;
  for (const Device& d : devices_) all_cpu = all_cpu && d.kind == DeviceKind::kCpu;
  update.shard = shard_update_wanted(layout.shard_optimizer_update) && n * num_workers_ > 1 && all_cpu;
  // One process's replicas share the host's memory: they read each other's gradients in place
  // ($LOCKSTEP_GRADIENTS_IN_PLACE=0 reduce-scatters them as across workers; for comparisons).
  update.gradients_in_place = update.shard && num_workers_ == 1 && env_flag_not_zero("LOCKSTEP_GRADIENTS_IN_PLACE");
  // Workers may differ here: either way every bucket's collective starts in bucket order.
  update.overlap = env_flag_not_zero("LOCKSTEP_OVERLAP_GRADIENTS");
  update_ = std::make_shared<ShardedUpdate>(*group_, update);
  replicas_->owner = this;
  start_replica_threads();
}

backend::ComputeContext& Strategy::context(int replica) {
  LOCKSTEP_CHECK(replica >= 0 && replica < num_local_replicas(), "replica ", replica, " out of range");
  return *contexts_[static_cast<std::size_t>(replica)];
}

Strategy* Strategy::current() { return t_current_strategy; }

StrategyScope::StrategyScope(Strategy& strategy)
    : strategy_(strategy), mirror_(strategy.contexts()), previous_(t_current_strategy) {
  t_current_strategy = &strategy;
}
StrategyScope::~StrategyScope() { t_current_strategy = previous_; }

void Strategy::mirror_variables(const std::vector<Variable>& variables) {
  for (auto v : variables) v.mirror(context_ptrs_);
}

void Strategy::check_mirrored(const std::vector<Variable>& variables) const {
  for (const auto& v : variables) {
    if (v.synchronization() == VariableSynchronization::kOnRead) continue;  // its copies differ by design
    for (int r = 1; r < v.num_copies(); ++r) {
      const Tensor& a = v.copy(0);
      const Tensor& b = v.copy(r);
      if (!a.bitwise_equal(b)) {
        throw DistributedError("mirrored variable '" + v.name() + "' drifted: replica " + std::to_string(r) +
                               "'s copy differs from replica 0's");
      }
    }
  }
}

Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size) {
  LOCKSTEP_CHECK(global_batch_size > 0, "compute_average_loss: global_batch_size must be positive, got ",
                 global_batch_size);
  return scale(sum(per_example_loss), 1.0f / static_cast<float>(global_batch_size));
}

Tensor compute_average_loss(const Tensor& per_example_loss) {
  LOCKSTEP_CHECK(per_example_loss.defined() && per_example_loss.rank() >= 1,
                 "compute_average_loss: expects per-example losses (rank >= 1), got ",
                 per_example_loss.defined() ? per_example_loss.shape().str() : std::string("an undefined tensor"));
  const std::int64_t local = per_example_loss.dim(0);
  const ReplicaInterface* r = current_replica();
  std::int64_t global = local;
  if (r) global = r->global_batch_size() > 0 ? r->global_batch_size() : local * r->num_replicas_in_sync();
  // An empty slice of a non-empty batch contributes 0; an empty batch has no mean (as TF: 0).
  if (global == 0) return scale(sum(per_example_loss), 0.0f);
  return compute_average_loss(per_example_loss, global);
}

// ---------------------------------------------------------------------------------------
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
  return l;
// "gpu:0x4" -> four entries gpu:0; anything else as it is.
std::vector<std::string> expand_logical(const std::vector<std::string>& devices) {
  std::vector<std::string> out;
  for (const auto& s : devices) {
    const std::size_t x = s.rfind('x');
    const bool gpu = s.rfind("gpu:", 0) == 0 || s.rfind("GPU:", 0) == 0 || s.rfind("cuda:", 0) == 0;
    if (!gpu || x == std::string::npos || x < s.find(':')) {
      out.push_back(s);
      continue;
    const std::string count = s.substr(x + 1);
    char* end = nullptr;
    const long n = std::strtol(count.c_str(), &end, 10);
    LOCKSTEP_CHECK(!count.empty() && *end == '\0' && n >= 1 && n <= 64, "device '", s,
                   "': logical devices on a GPU are written gpu:N xK with K in [1, 64], e.g. gpu:0x4");
    for (long i = 0; i < n; ++i) out.push_back(s.substr(0, x));
  return out;
// Replicas on GPUs: one thread each (the GPU computes). Replicas sharing a GPU enqueue on its
// one stream, so the shared-memory group's combine kernels see each other's tensors in order;
// replicas on distinct GPUs go through NCCL.
Layout gpu_layout(const std::vector<int>& gpus, const MirroredOptions& o) {
  const int count = backend::cuda_device_count();
  for (int g : gpus) {
    LOCKSTEP_CHECK(g < count, "device 'gpu:", g, "' does not exist: this machine has ", count, " GPU(s)",
                   (count == 0 ? " (or lockstep was built without CUDA)" : ""));
  LOCKSTEP_CHECK(backend::backend_available(DeviceKind::kCuda), "MirroredStrategy on GPUs: this lockstep was built "
                 "without CUDA (LOCKSTEP_WITH_CUDA=OFF)");
  std::vector<int> distinct;
  bool shared = false;
    if (std::find(distinct.begin(), distinct.end(), g) == distinct.end()) distinct.push_back(g);
    else shared = true;
    l.devices.push_back(Device{DeviceKind::kCuda, g});
    l.threads.push_back(1);
    l.cpus.emplace_back();
  l.memory_limit = o.gpu_memory_limit;
  l.timeout = o.collective_timeout;
  l.bucket_cap_bytes = o.bucket_cap_bytes;
  l.shard_optimizer_update = o.shard_optimizer_update;
  l.cross_device_ops = o.cross_device_ops;
  if (distinct.size() > 1) {
    LOCKSTEP_CHECK(!shared, "MirroredStrategy: replicas on ", distinct.size(), " GPUs with some GPU holding several "
                   "(logical devices): NCCL needs one replica per GPU and replicas sharing a GPU reduce through its "
                   "memory; use one replica per GPU, or all replicas on one GPU");
    LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kLoopback, "MirroredStrategy: cross_device_ops "
                   "loopback works on one GPU only; replicas on several GPUs all-reduce over NCCL");
    // Emulated GPUs (LOCKSTEP_EMULATED_GPUS) have host memory and no NCCL: the shared-memory group
    // reduces them, so that the rest of a layout over several GPUs is tested without one.
    l.cross_device_ops =
        backend::gpus_emulated() ? CollectiveImplementation::kSharedMemory : CollectiveImplementation::kNccl;
  } else if (o.cross_device_ops == CollectiveImplementation::kNccl) {
    LOCKSTEP_CHECK(!shared, "MirroredStrategy: cross_device_ops nccl needs one replica per GPU (NCCL cannot have two "
                   "ranks on one GPU); replicas sharing a GPU use shared_memory");
bool cpu_devices_asked(const MirroredOptions& o) {
  return o.num_cpu_devices > 0 || env::is_set("LOCKSTEP_CPU_DEVICES");
Layout mirrored_layout(const MirroredOptions& o) {
  LOCKSTEP_CHECK(o.num_cpu_devices >= 0 && o.num_cpu_devices <= kMaxCpuDevices, "MirroredStrategy: ",
                 o.num_cpu_devices, " logical CPU devices asked for; the count must be in [1, ", kMaxCpuDevices,
                 "] (0: the default)");
  LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kMpi,
                 "MirroredStrategy: cross_device_ops kMpi spans workers; use MultiWorkerMirroredStrategy");
  const int num_cpu = o.num_cpu_devices > 0 ? o.num_cpu_devices : default_num_cpu_devices();
  std::vector<int> cpu_indices;
  std::vector<int> gpu_indices;
  for (const auto& s : expand_logical(o.devices)) {
    const Device d = Device::parse(s);
    if (d.kind == DeviceKind::kCpu) {
      LOCKSTEP_CHECK(d.index < num_cpu, "device '", s, "' does not exist: there are ", num_cpu,
                     " logical CPU devices (cpu:0 .. cpu:", num_cpu - 1, "; set num_cpu_devices or LOCKSTEP_CPU_DEVICES)");
      cpu_indices.push_back(d.index);
    } else {
      gpu_indices.push_back(d.index);
  LOCKSTEP_CHECK(cpu_indices.empty() || gpu_indices.empty(), "MirroredStrategy: devices mix CPUs and GPUs; mirror over "
                 "one kind");
  if (o.devices.empty() && !cpu_devices_asked(o)) {
    // Every local GPU (TF's default); the CPU devices only when there is none.
    const int gpus = backend::backend_available(DeviceKind::kCuda) ? backend::cuda_device_count() : 0;
    for (int g = 0; g < gpus; ++g) gpu_indices.push_back(g);
    if (gpus == 0 && backend::backend_available(DeviceKind::kCuda)) {
      static std::once_flag notice;
      std::call_once(notice, [] {
        std::fprintf(stderr, "MirroredStrategy: no GPU visible; mirroring over the logical CPU devices\n");
      });
  if (!gpu_indices.empty()) return gpu_layout(gpu_indices, o);
  LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kNccl,
                 "MirroredStrategy: cross_device_ops nccl is for GPU replicas; these are CPU devices");
  for (std::size_t i = 0; i < cpu_indices.size(); ++i)
    for (std::size_t j = i + 1; j < cpu_indices.size(); ++j)
      LOCKSTEP_CHECK(cpu_indices[i] != cpu_indices[j], "device 'cpu:", cpu_indices[i], "' is listed twice");
  if (cpu_indices.empty())
    for (int i = 0; i < num_cpu; ++i) cpu_indices.push_back(i);
  Layout l = cpu_layout(cpu_indices, num_cpu, o.pin_threads);
Layout one_device_layout(const std::string& device) {
  const Device d = Device::parse(device);
  if (d.kind == DeviceKind::kCuda) {
    MirroredOptions o;
    return gpu_layout({d.index}, o);
  l.devices = {d};
  l.threads = {backend::default_cpu_threads()};
  l.cpus = {{}};
Layout multi_worker_layout(const MultiWorkerOptions& o) {
  MirroredOptions local = o.local;
  local.cross_device_ops = CollectiveImplementation::kSharedMemory;
  Layout l = mirrored_layout(local);
  const bool launched = launched_under_mpi();
  if (!launched || !built_with_mpi()) {
    if (o.notice || launched)
      std::fprintf(stderr, "MultiWorkerMirroredStrategy: %s; training as MirroredStrategy on one worker\n",
                   launched ? "lockstep was built without MPI (LOCKSTEP_WITH_MPI=OFF)" : "not launched under MPI (mpirun)");
    return l;
  // GPU replicas across workers: each worker's replicas on one GPU (one process per GPU, as
  // mpirun -np G runs it; or logical replicas gpu:KxN). They combine through that GPU's memory,
  // and across workers through host copies over MPI (MultiWorkerGroup stages device tensors);
  // NCCL across processes is not built, and replicas on several GPUs of one worker would need it.
  if (l.devices.front().kind != DeviceKind::kCpu) {
    for (const Device& d : l.devices)
      LOCKSTEP_CHECK(d == l.devices.front(), "MultiWorkerMirroredStrategy: this worker's replicas are on ",
                     l.devices.front().str(), " and ", d.str(), "; across workers each worker's replicas must share "
                     "one GPU (run one worker per GPU: --devices gpu:K), since NCCL across processes is not built");
  WorkerTransport& world = WorkerTransport::world();
  l.num_workers = world.size();
  l.worker_index = world.rank();
  l.cross_device_ops = CollectiveImplementation::kMpi;
  // The workers shard the optimizer update alike: one whose options or LOCKSTEP_SHARD_UPDATE say
  // no turns it off for all (else its all-reduce would meet the others' reduce-scatter at the
  // first step). A tag above the collective groups' (multi_worker_group.cpp: 1..32000).
  constexpr int kLayoutTag = 32500;
  const auto deadline = std::chrono::steady_clock::now() + local.collective_timeout;
  const WorkerTransport::Bytes mine{std::byte{shard_update_wanted(l.shard_optimizer_update) ? std::uint8_t{1} : std::uint8_t{0}}};
  for (const auto& theirs : world.all_to_all(kLayoutTag, mine, deadline, local.collective_timeout, "the strategy's set-up"))
    l.shard_optimizer_update = l.shard_optimizer_update && theirs.at(0) == std::byte{1};
}  // namespace
MirroredStrategy::MirroredStrategy(const MirroredOptions& o) : Strategy(mirrored_layout(o)) {}
MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerOptions& o) : Strategy(multi_worker_layout(o)) {}
OneDeviceStrategy::OneDeviceStrategy(const std::string& device) : Strategy(one_device_layout(device)) {}
}  // namespace lockstep::distribute
