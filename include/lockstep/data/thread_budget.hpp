#pragma once
// ThreadBudget: how many cores the input pipeline may keep busy without slowing training.
//
// Policy. The machine has cores() cores (backend::available_cores(): the process's affinity
// mask). Compute pools that are training reserve the cores they keep busy with
// reserve_compute() and hold the reservation while they train. The input pipeline may then
// run input_capacity() = max(1, cores() - compute_reserved()) busy threads at once, shared by
// every autotuned stage in the process: each such stage asks for threads with acquire_input(),
// always gets at least one (a pipeline must make progress even when compute holds every core;
// that one thread mostly sleeps while the consumer trains), and grows past that only while the
// budget has room. Stages re-check the budget as they run, so a reservation made after a
// pipeline started (fit() starting) shrinks it. What is not counted: threads that only wait on
// other threads (prefetch's producer, which spends its time blocked on the stage below or on a
// full buffer), and threads of stages given an explicit num_parallel_calls, which the caller
// chose. Buffers that autotune sizes stay within buffer_bytes() each.
//
// One budget per process (process()), because cores are a process-wide resource; a test or a
// strategy that wants isolation can make its own and pass it to nothing else yet.
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace lockstep::data {

class ThreadBudget {
 public:
  /// A budget over `cores` cores (>= 1).
  explicit ThreadBudget(int cores);
  ThreadBudget(const ThreadBudget&) = delete;
  ThreadBudget& operator=(const ThreadBudget&) = delete;

  /// The process's budget, over backend::available_cores(). Thread-safe.
  static ThreadBudget& process();

  /// Threads counted against the budget, returned when the lease dies. Move-only.
  class Lease {
   public:
    Lease() = default;
    ~Lease();
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    int count() const { return count_; }
    /// Input leases: one more thread if the budget has room. Returns whether it got one.
    bool try_grow();
    /// Gives back one thread (no-op at zero).
    void shrink();
    /// True when the budget is overdrawn and this lease holds more than one thread: a stage
    /// that sees it should shrink.
    bool should_shrink() const;

   private:
    friend class ThreadBudget;
    enum class Kind : std::uint8_t { kCompute, kInput };
    Lease(ThreadBudget* budget, Kind kind, int count) : budget_(budget), kind_(kind), count_(count) {}
    void release();
    ThreadBudget* budget_ = nullptr;
    Kind kind_ = Kind::kInput;
    int count_ = 0;
  };

  /// A compute pool keeps `cores` cores busy until the lease dies (fit() holds one per replica
  /// pool). May exceed cores(); input then gets its minimum of one thread per stage.
  Lease reserve_compute(int cores);
  /// Up to `wanted` input threads (>= 1): at least one even past the budget, more only while
  /// input_in_use() < input_capacity().
  Lease acquire_input(int wanted);

  int cores() const { return cores_; }
  int compute_reserved() const;
  int input_in_use() const;
  /// max(1, cores() - compute_reserved()).
  int input_capacity() const;
  /// The most bytes one autotuned buffer may hold (default 256 MiB).
  std::size_t buffer_bytes() const;
  void set_buffer_bytes(std::size_t bytes);

 private:
  int cores_;
  mutable std::mutex mu_;
  int compute_ = 0;
  int input_ = 0;
  std::size_t buffer_bytes_ = std::size_t{256} << 20;
};

}  // namespace lockstep::data
