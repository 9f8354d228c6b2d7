// Graph capture on emulated GPUs: recording kernel tables generated from the op list, device
// copies and fences recorded or refused, contexts joined by fences, and the recordings replayed
// in an order their fences allow (emulated_capture.hpp).
#include "backend/emulated_capture.hpp"

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/emulated_gpu.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::emulated {

namespace {

// One capture: the work each context that joined it (its lanes; lane 0 began it) queued, in
// order, with the fences recorded and waited for between them.
struct Recording {
  struct Item {
    std::function<void()> work;  // or a fence:
    int record = -1;             // this lane passes fence `record` here
    int wait = -1;               // this lane waits here until fence `wait` was passed
  };
  struct Lane {
    ComputeContext* ctx = nullptr;
    // The one thread whose work the lane records: lane 0's began the capture and ends it (as CUDA's
    // capture modes ask), each other's joined it. Another thread's work there is refused.
    std::thread::id thread;
    // The lane's queue (its context's device and use_stream), which other contexts may share;
    // read without the context, which a test may destroy inside the capture.
    Device device;
    int stream = 0;
    std::vector<Item> items;
  };
  // Guarded by g_mu while the capture is under way, as the maps that lead to it: end_capture
  // takes it out of them under g_mu, and from then on it is lane 0's alone.
  std::vector<Lane> lanes;
  int fences = 0;
  std::vector<std::unique_ptr<char>> marks;  // the fences handed out: their addresses are their names
};

// Why work queued while a capture is under way is refused whatever it is (refuse), where CUDA
// would record it into the capture's graph instead of running it now, or where the emulation
// cannot tell whether CUDA would:
//   * kOtherThread: a thread other than the lane's queues on its captured queue (through the
//     lane's context or another one on that queue): CUDA records what any thread queues there;
//   * kOtherContext: the lane's own thread queues through another context on its queue: CUDA would
//     record it, but that context's memory is not the graph's pool (each context allocates from
//     its own), so a replay could write what the host has reused; and the graph's recordings run
//     on their lanes' contexts;
//   * kHostContext: a CPU context's copy of GPU memory (DeviceOps called on a host thread): CUDA
//     queues it on stream 0 of the GPU that holds the memory (refused from another thread while
//     that stream is captured, recorded or refused from the capturing one); host memory does not
//     say which emulated GPU it is, so it is refused while any capture is under way.
enum class Refusal { kNone, kOtherThread, kOtherContext, kHostContext };

// The captures under way: which context records into which capture as which lane, and which
// fence handed out belongs to which capture. Looked up only while a capture is under way.
struct Where {
  // Read only under g_mu, the hold that found it: once the lock is released the capturing thread
  // may end the capture and free it (record() looks the lane up again).
  Recording* rec = nullptr;
  int index = -1;  // the lane, or the fence
  Refusal refusal = Refusal::kNone;
  Device gpu;  // the captured GPU, for a refusal's words
  explicit operator bool() const { return rec != nullptr; }
  bool refused() const { return refusal != Refusal::kNone; }
};
std::mutex g_mu;
std::atomic<int> g_captures{0};
std::unordered_map<const ComputeContext*, Where> g_lanes;
std::unordered_map<const void*, Where> g_fences;
std::vector<Recording*> g_recordings;  // the captures under way
// The queue of each context that use_stream moved off stream 0, which every other context of its
// device shares (as CUDA's contexts of a GPU share its stream 0).
std::unordered_map<const ComputeContext*, int> g_streams;

std::atomic<std::int64_t> g_replays{0}, g_replayed_lanes{0}, g_replayed_work{0};

// set_emulated_record_hook's hook (tests), looked at without a lock where none was set.
std::atomic<bool> g_has_record_hook{false};
std::mutex g_record_hook_mu;
std::function<void()> g_record_hook;

void before_record() {
  if (!g_has_record_hook.load(std::memory_order_acquire)) [[likely]]
    return;
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(g_record_hook_mu);
    hook = g_record_hook;
  }
  if (hook) hook();
}

int stream_locked(const ComputeContext& ctx) {
  const auto it = g_streams.find(&ctx);
  return it == g_streams.end() ? 0 : it->second;
}

// Under g_mu: the lane `ctx` records into, or a lane whose queue `ctx` shares (refused: Refusal
// says why), or for a CPU context any capture (refused); none where `ctx`'s work runs now.
Where where_locked(const ComputeContext& ctx) {
  const std::thread::id me = std::this_thread::get_id();
  const auto by = [&](const Recording::Lane& lane, Refusal otherwise) {
    return lane.thread != me ? Refusal::kOtherThread : otherwise;
  };
  if (const auto it = g_lanes.find(&ctx); it != g_lanes.end()) {
    Where at = it->second;
    at.refusal = by(at.rec->lanes[static_cast<std::size_t>(at.index)], Refusal::kNone);
    return at;
  }
  if (g_recordings.empty()) return {};
  if (ctx.device().kind == DeviceKind::kCpu) {
    Recording* rec = g_recordings.front();
    return {.rec = rec, .refusal = Refusal::kHostContext, .gpu = rec->lanes[0].device};
  }
  const int stream = stream_locked(ctx);
  for (Recording* rec : g_recordings)
    for (std::size_t k = 0; k < rec->lanes.size(); ++k) {
      const Recording::Lane& lane = rec->lanes[k];
      if (lane.device == ctx.device() && lane.stream == stream)
        return {.rec = rec, .index = static_cast<int>(k), .refusal = by(lane, Refusal::kOtherContext),
                .gpu = ctx.device()};
    }
  return {};
}

Where capturing(const ComputeContext& ctx) {
  if (g_captures.load(std::memory_order_acquire) == 0) [[likely]]
    return {};
  std::lock_guard<std::mutex> lock(g_mu);
  return where_locked(ctx);
}

// Adds `work` to the recording of the lane `ctx` records into, found again under g_mu: a Where
// found before may name a capture that lane 0 has ended since, and freed (its step failed while
// the other lanes still queued theirs). False where `ctx` is captured no more: the caller runs
// the work now, as work queued after the end runs.
bool record(const ComputeContext& ctx, std::function<void()> work) {
  before_record();
  std::lock_guard<std::mutex> lock(g_mu);
  const auto it = g_lanes.find(&ctx);
  if (it == g_lanes.end()) return false;
  it->second.rec->lanes[static_cast<std::size_t>(it->second.index)].items.push_back({.work = std::move(work)});
  return true;
}

std::string lane_name(const ComputeContext& ctx, int lane) {
  return lane == 0 ? ctx.device().str() : ctx.device().str() + " (lane " + std::to_string(lane) + " of the capture)";
}

// `what`, asked for at `at` while a capture is under way, refused: for what Refusal names whatever
// it is (another thread's work in CUDA's words, cuda_context.cpp: lane), else as what a replay
// could not repeat.
[[noreturn]] void refuse(const Where& at, const std::string& what) {
  const std::string gpu = at.gpu.str();
  const char* const later = "; queue it before the capture begins or after it ends";
  switch (at.refusal) {
    case Refusal::kOtherThread:
      throw ValueError(what + " queued by a thread other than the capture's inside a graph capture on " + gpu +
                       ": it would be recorded into that capture's graph instead of running now (a capture records "
                       "what any thread queues on its stream, which every context of the device shares)" + later);
    case Refusal::kOtherContext:
      throw ValueError(what + " queued through a second context of " + gpu + " by the thread capturing it, inside a "
                       "graph capture on " + gpu + ": CUDA would record it into the graph (the contexts share the "
                       "captured stream) while that context's memory is not the graph's; queue it through the "
                       "capturing context, or before the capture begins or after it ends");
    case Refusal::kHostContext:
      throw ValueError(what + " through a CPU context during a graph capture on " + gpu +
                       ": a GPU queues it on the stream of the GPU whose memory it is, which a capture there "
                       "records (emulated GPUs cannot tell which GPU's memory it is, and refuse it while any of "
                       "them captures); queue it on the GPU's own context, or before the capture begins or after it "
                       "ends");
    case Refusal::kNone:
      break;
  }
  throw ValueError(what + " inside a graph capture on " + gpu +
                   ": a replay could not repeat it (CUDA's stream capture fails there too)");
}

template <typename A>
constexpr bool is_pointer_array = std::is_pointer_v<std::remove_cvref_t<A>> &&
                                  std::is_pointer_v<std::remove_pointer_t<std::remove_cvref_t<A>>>;

// A host array of pointers (combine's inputs, the summed updates' gradients) is followed by its
// count: the recording keeps a copy of the array, as CUDA's launch copies it into the kernel's
// parameters.
template <std::size_t I, typename Tuple>
void keep_array(Tuple& args, std::vector<std::shared_ptr<void>>& kept) {
  using P = std::tuple_element_t<I, Tuple>;
  if constexpr (is_pointer_array<P>) {
    static_assert(I + 1 < std::tuple_size_v<Tuple> && std::is_same_v<std::tuple_element_t<I + 1, Tuple>, int>,
                  "a kernel's host array of pointers is followed by its count (an int)");
    using E = std::remove_cv_t<std::remove_pointer_t<P>>;
    auto copy = std::make_shared<std::vector<E>>(std::get<I>(args), std::get<I>(args) + std::get<I + 1>(args));
    std::get<I>(args) = copy->data();
    kept.push_back(std::move(copy));
  }
}

template <typename Sig>
struct Signature;
template <typename R, typename... A>
struct Signature<R (*)(ComputeContext&, A...)> {
  static constexpr bool returns_value = !std::is_void_v<R>;
};

// The recording kernel of one row for one dtype: runs the CPU's kernel, or records it with its
// arguments copied while its context is being captured.
template <DType D, auto Member, KernelOp Op, typename Sig>
struct Recorded;
template <DType D, auto Member, KernelOp Op, typename R, typename... A>
struct Recorded<D, Member, Op, R (*)(ComputeContext&, A...)> {
  static R call(ComputeContext& ctx, A... a) {
    const auto kernel = cpu::table(D).*Member;
    if (const Where at = capturing(ctx)) [[unlikely]] {
      if (at.refused()) refuse(at, std::string("the kernel ") + kernel_op_name(Op));
      if constexpr (Signature<R (*)(ComputeContext&, A...)>::returns_value) {
        refuse(at, std::string("the kernel ") + kernel_op_name(Op) + ", which returns its result to the host");
      } else {
        using Args = std::tuple<std::remove_cvref_t<A>...>;
        Args args(a...);
        std::vector<std::shared_ptr<void>> kept;
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          (keep_array<I>(args, kept), ...);
        }(std::index_sequence_for<A...>{});
        if (record(ctx, [kernel, &ctx, args, kept = std::move(kept)] {
              std::apply([&](const auto&... v) { kernel(ctx, v...); }, args);
            }))
          return;
      }
    }
    return kernel(ctx, a...);
  }
};

template <DType D>
KernelTable recording_table() {
  const KernelTable& cpu = cpu::table(D);
  KernelTable t;
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) \
  if (cpu.name) t.name = &Recorded<D, &KernelTable::name, KernelOp::Op, decltype(KernelTable::name)>::call;
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
  return t;
}

// The emulated device's own memory work and fences, which the capturing ops run or record.
DeviceOps*& base_ops() {
  static DeviceOps* base = nullptr;
  return base;
}

void copy(ComputeContext& ctx, void* dst, const void* src, std::size_t bytes) {
  if (const Where at = capturing(ctx)) [[unlikely]] {
    if (at.refused()) refuse(at, "a copy of " + std::to_string(bytes) + " bytes on the device");
    if (record(ctx, [&ctx, dst, src, bytes] { base_ops()->copy(ctx, dst, src, bytes); })) return;
  }
  base_ops()->copy(ctx, dst, src, bytes);
}
void zero(ComputeContext& ctx, void* dst, std::size_t bytes) {
  if (const Where at = capturing(ctx)) [[unlikely]] {
    if (at.refused()) refuse(at, "a fill of " + std::to_string(bytes) + " bytes with zeros");
    if (record(ctx, [&ctx, dst, bytes] { base_ops()->zero(ctx, dst, bytes); })) return;
  }
  base_ops()->zero(ctx, dst, bytes);
}
void copy_to_host(ComputeContext& ctx, void* host, const void* src, std::size_t bytes) {
  if (const Where at = capturing(ctx)) [[unlikely]]
    refuse(at, "a copy of " + std::to_string(bytes) + " bytes from the device to the host");
  base_ops()->copy_to_host(ctx, host, src, bytes);
}
void copy_from_host(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes) {
  refuse_host_copy_in_capture(ctx, bytes);
  base_ops()->copy_from_host(ctx, dst, host, bytes);
}
void copy_from_host_beside(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes, void* after) {
  refuse_host_copy_in_capture(ctx, bytes);
  base_ops()->copy_from_host_beside(ctx, dst, host, bytes, after);
}
bool equal_bytes(ComputeContext& ctx, const void* a, const void* b, std::size_t bytes) {
  if (const Where at = capturing(ctx)) [[unlikely]]
    refuse(at, "a comparison of two tensors' bytes read on the host");
  return base_ops()->equal_bytes(ctx, a, b, bytes);
}

// A fence on a context being captured is a point in its lane's recording, named by an address of
// its own (the fences outside captures share one, as they all have passed).
void* record_fence(ComputeContext& ctx, bool copy_stream) {
  void* const outside = base_ops()->record_fence(ctx, copy_stream);  // counted either way
  if (copy_stream || g_captures.load(std::memory_order_acquire) == 0) [[likely]]
    return outside;
  // Found and recorded under one hold of g_mu: a capture ended meanwhile is found no more.
  std::lock_guard<std::mutex> lock(g_mu);
  const Where at = where_locked(ctx);
  if (!at) return outside;
  if (at.refused()) refuse(at, "a fence");
  const int id = at.rec->fences++;
  at.rec->marks.push_back(std::make_unique<char>());
  void* mark = at.rec->marks.back().get();
  at.rec->lanes[static_cast<std::size_t>(at.index)].items.push_back({.record = id});
  g_fences[mark] = {at.rec, id};
  return mark;
}

// Waiting for a fence of a capture from a context outside every capture joins that context to
// the capture (CUDA's fork); from one inside it, orders the two lanes there.
void wait_fence(ComputeContext& ctx, void* fence) {
  base_ops()->wait_fence(ctx, fence);
  if (g_captures.load(std::memory_order_acquire) == 0) [[likely]]
    return;
  std::lock_guard<std::mutex> lock(g_mu);
  const Where at = where_locked(ctx);
  if (at.refused()) refuse(at, "a wait for a fence");
  const auto f = g_fences.find(fence);
  if (f == g_fences.end()) {
    if (at)
      refuse(at, "a wait for work queued outside the capture (CUDA: a captured stream may wait only for events "
                 "recorded in its capture)");
    return;
  }
  Recording* rec = f->second.rec;
  if (at && at.rec != rec) refuse(at, "a wait for a fence of another capture (CUDA cannot merge two captures)");
  int lane = at.index;
  if (!at) {
    lane = static_cast<int>(rec->lanes.size());
    rec->lanes.push_back(
        {.ctx = &ctx, .thread = std::this_thread::get_id(), .device = ctx.device(), .stream = stream_locked(ctx)});
    g_lanes[&ctx] = {.rec = rec, .index = lane, .gpu = ctx.device()};
  }
  rec->lanes[static_cast<std::size_t>(lane)].items.push_back({.wait = f->second.index});
}

// Where the context's queue is, for where_locked: stream 0 by default.
void use_stream(ComputeContext& ctx, int stream) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (stream == 0) g_streams.erase(&ctx);
    else g_streams[&ctx] = stream;
  }
  base_ops()->use_stream(ctx, stream);
}

// A lane other than 0 is joined when its last item is a fence lane 0 waits for.
void check_joined(const Recording& rec) {
  for (std::size_t k = 1; k < rec.lanes.size(); ++k) {
    const auto& items = rec.lanes[k].items;
    bool joined = false;
    if (!items.empty() && items.back().record >= 0)
      for (const auto& item : rec.lanes[0].items) joined = joined || item.wait == items.back().record;
    LOCKSTEP_CHECK(joined, "a graph capture on ", rec.lanes[0].ctx->device().str(), " ended before ",
                   lane_name(*rec.lanes[k].ctx, static_cast<int>(k)),
                   ", which joined it, was joined back: its last work must be fenced and that fence waited for on "
                   "the capturing context (CUDA fails with cudaErrorStreamCaptureUnjoined)");
  }
}

}  // namespace

void refuse_host_copy_in_capture(const ComputeContext& ctx, std::size_t bytes) {
  if (const Where at = capturing(ctx)) [[unlikely]]
    refuse(at, "a copy of " + std::to_string(bytes) + " bytes from the host to the device");
}

bool recorded(const ComputeContext& ctx) {
  if (g_captures.load(std::memory_order_acquire) == 0) [[likely]]
    return false;
  std::lock_guard<std::mutex> lock(g_mu);
  return g_lanes.contains(&ctx);
}

const KernelTable& kernels(DType dtype) {
  static const KernelTable f32 = recording_table<DType::kF32>();
  static const KernelTable f16 = recording_table<DType::kF16>();
  static const KernelTable bf16 = recording_table<DType::kBF16>();
  static const KernelTable i32 = recording_table<DType::kI32>();
  static const KernelTable i64 = recording_table<DType::kI64>();
  static const KernelTable u8 = recording_table<DType::kU8>();
  switch (dtype) {
    case DType::kF32: return f32;
    case DType::kF16: return f16;
    case DType::kBF16: return bf16;
    case DType::kI32: return i32;
    case DType::kI64: return i64;
    case DType::kU8: return u8;
  }
  return f32;
}

DeviceOps capturing_ops(const DeviceOps& base) {
  static DeviceOps kept;
  kept = base;
  base_ops() = &kept;
  DeviceOps o = base;
  o.copy = copy;
  o.zero = zero;
  o.copy_to_host = copy_to_host;
  o.copy_from_host = copy_from_host;
  o.copy_from_host_beside = copy_from_host_beside;
  o.equal_bytes = equal_bytes;
  o.record_fence = record_fence;
  o.wait_fence = wait_fence;
  o.use_stream = use_stream;
  return o;
}

void begin_capture(ComputeContext& ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  LOCKSTEP_CHECK(!g_lanes.contains(&ctx), "a graph capture of ", ctx.device().str(),
                 " is already under way on this context: captures do not nest");
  auto* rec = new Recording;
  rec->lanes.push_back(
      {.ctx = &ctx, .thread = std::this_thread::get_id(), .device = ctx.device(), .stream = stream_locked(ctx)});
  g_lanes[&ctx] = {.rec = rec, .index = 0, .gpu = ctx.device()};
  g_recordings.push_back(rec);
  g_captures.fetch_add(1, std::memory_order_acq_rel);
}

std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep) {
  std::unique_ptr<Recording> rec;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const auto it = g_lanes.find(&ctx);
    if (it == g_lanes.end() || it->second.index != 0 || it->second.rec->lanes[0].thread != std::this_thread::get_id())
      throw InternalError("end_capture on " + ctx.device().str() + " without its begin_capture on this thread");
    rec.reset(it->second.rec);
    for (const auto& lane : rec->lanes) g_lanes.erase(lane.ctx);
    for (const auto& mark : rec->marks) g_fences.erase(mark.get());
    std::erase(g_recordings, rec.get());
    g_captures.fetch_sub(1, std::memory_order_acq_rel);
  }
  if (!keep) return nullptr;
  check_joined(*rec);
  return std::shared_ptr<Recording>(std::move(rec));
}

void replay(ComputeContext&, void* graph) {
  auto& rec = *static_cast<Recording*>(graph);
  const std::size_t n = rec.lanes.size();
  std::vector<std::size_t> next(n, 0);
  std::vector<char> passed(static_cast<std::size_t>(rec.fences), 0);
  std::int64_t work = 0;
  for (std::size_t done = 0; done < n;) {
    bool moved = false;
    done = 0;
    for (std::size_t k = n; k-- > 0;) {  // the last lane as far as it goes, then the one before ...
      const auto& items = rec.lanes[k].items;
      std::size_t& i = next[k];
      for (; i < items.size(); ++i, moved = true) {
        const Recording::Item& item = items[i];
        if (item.wait >= 0 && !passed[static_cast<std::size_t>(item.wait)]) break;
        if (item.record >= 0) passed[static_cast<std::size_t>(item.record)] = 1;
        if (item.work) {
          item.work();
          ++work;
        }
      }
      done += i == items.size() ? 1 : 0;
    }
    if (!moved && done < n)
      throw InternalError("a graph on " + rec.lanes[0].ctx->device().str() +
                          ": its lanes wait for fences none of them passes");
  }
  g_replays.fetch_add(1, std::memory_order_relaxed);
  g_replayed_lanes.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  g_replayed_work.fetch_add(work, std::memory_order_relaxed);
}

}  // namespace lockstep::backend::emulated

namespace lockstep::backend {
void set_emulated_record_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(emulated::g_record_hook_mu);
  emulated::g_has_record_hook.store(static_cast<bool>(hook), std::memory_order_release);
  emulated::g_record_hook = std::move(hook);
}

EmulatedReplays emulated_replays() {
  return {emulated::g_replays.load(std::memory_order_relaxed), emulated::g_replayed_lanes.load(std::memory_order_relaxed),
          emulated::g_replayed_work.load(std::memory_order_relaxed)};
}
}  // namespace lockstep::backend
