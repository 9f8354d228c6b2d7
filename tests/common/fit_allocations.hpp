#pragma once
// Heap allocations (operator new, every form) made on the thread that counts them, while it
// counts: fit's own work on its thread, which is the same on every run, not the input or kernel
// threads' (whose share of a window depends on timing). This header replaces the global operator
// new and delete: include it in one source file of a test binary only.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "lockstep/lockstep.hpp"

namespace lockstep::test {
inline thread_local bool t_counting_allocations = false;
inline thread_local std::uint64_t t_allocations = 0;
}  // namespace lockstep::test

void* operator new(std::size_t n) {
  if (lockstep::test::t_counting_allocations) ++lockstep::test::t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC sees free() where it inlines a delete of memory this operator new gave: the pair is ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
// The nothrow form too (std::stable_sort's buffer): libstdc++'s calls the one above, but a
// sanitizer's runtime replaces it with its own, whose memory the delete above must not free.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (lockstep::test::t_counting_allocations) ++lockstep::test::t_allocations;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace lockstep::test {
// Counts fit's thread's allocations from the start of batch `from` to the end of the last batch.
class CountFitAllocations final : public Callback {
 public:
  explicit CountFitAllocations(std::int64_t from) : from_(from) {}
  void on_train_batch_begin(std::int64_t batch, const Logs&) override {
    if (batch != from_) return;
    t_allocations = 0;
    t_counting_allocations = true;
  }
  void on_train_batch_end(std::int64_t batch, const Logs&) override {
    if (batch < from_) return;
    t_counting_allocations = false;
    counted = t_allocations;
    batches = batch - from_ + 1;
    t_counting_allocations = true;
  }
  void on_train_end(const Logs&) override { t_counting_allocations = false; }
  double per_batch() const { return batches ? static_cast<double>(counted) / static_cast<double>(batches) : 0.0; }
  std::uint64_t counted = 0;
  std::int64_t batches = 0;

 private:
  std::int64_t from_;
};

// Fits `model` for 120 steps of `dataset` (repeated), every batch gathered on fit's thread (none
// by a worker ahead), and counts fit's thread's allocations over the last 100 steps.
inline std::shared_ptr<CountFitAllocations> count_fit_allocations(Model& model, const data::Dataset& dataset) {
  const auto count = std::make_shared<CountFitAllocations>(20);
  FitOptions o{.epochs = 1, .steps_per_epoch = 120, .verbose = 0};
  o.gather_ahead = false;
  o.callbacks = {count};
  model.fit(dataset, o);
  return count;
}
}  // namespace lockstep::test
