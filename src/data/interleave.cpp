// interleave: tf.data's InterleaveDataset state machine, run on the consumer's thread. In
// parallel mode the open datasets are read ahead by pipeline threads into per-slot buffers;
// the state machine, and so the order of the elements, stays exactly the sequential one.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "data/nodes.hpp"
#include "data/worker.hpp"
#include "lockstep/data/thread_budget.hpp"

namespace lockstep::data::detail {

namespace {

constexpr const char* kWho = "Dataset::interleave";

// One open dataset of the cycle, with the elements read ahead of the consumer.
struct Slot {
  std::unique_ptr<Iterator> it;
  std::deque<Element> ahead;
  std::exception_ptr error;
  bool exhausted = false;
  bool busy = false;  // a worker is inside it->next()
};

class InterleaveIterator final : public Iterator {
 public:
  InterleaveIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const InterleaveFn> fn, std::int64_t cycle,
                     std::int64_t block, std::int64_t parallel)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        block_(block),
        parallel_(parallel),
        slots_(static_cast<std::size_t>(cycle)),
        ahead_(std::max<std::int64_t>(2, block)) {}

  ~InterleaveIterator() override { shutdown(); }

  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    try {
      if (parallel_ != 1 && workers_.empty()) start();
      while (input_ || open_ > 0) {
        if (slots_[cursor_]) {
          if (auto e = take(cursor_)) {
            if (++in_block_ == block_) advance();
            return e;
          }
          close(cursor_);
          advance();
        } else if (input_) {
          open(cursor_);
        } else {
          advance();
        }
      }
    } catch (...) {
      done_ = true;
      shutdown();
      throw;
    }
    done_ = true;
    shutdown();
    return std::nullopt;
  }

 private:
  void advance() {
    in_block_ = 0;
    cursor_ = (cursor_ + 1) % slots_.size();
  }

  // Opens slot k on the next input element; false when the input is exhausted.
  bool open(std::size_t k) {
    auto e = input_->next();
    if (!e) {
      input_.reset();
      return false;
    }
    std::unique_ptr<Iterator> it;
    try {
      it = (*fn_)(*e).make_iterator();
    } catch (...) {
      std::rethrow_exception(function_error(kWho, opened_));
    }
    ++opened_;
    auto slot = std::make_shared<Slot>();
    slot->it = std::move(it);
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_[k] = std::move(slot);
    }
    ++open_;
    cv_work_.notify_all();
    return true;
  }

  void close(std::size_t k) {
    std::shared_ptr<Slot> dead;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dead = std::move(slots_[k]);
    }
    --open_;
  }

  std::optional<Element> take(std::size_t k) {
    Slot& s = *slots_[k];
    if (parallel_ == 1) {
      if (s.exhausted) return std::nullopt;
      auto e = s.it->next();
      if (!e) s.exhausted = true;
      return e;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_ready_.wait(lock, [&] { return !s.ahead.empty() || s.exhausted; });
    if (!s.ahead.empty()) {
      Element e = std::move(s.ahead.front());
      s.ahead.pop_front();
      lock.unlock();
      cv_work_.notify_all();
      return e;
    }
    if (s.error) std::rethrow_exception(s.error);
    return std::nullopt;
  }

  void start() {
    int threads = static_cast<int>(parallel_);
    if (parallel_ == kAutotune) {
      lease_ = ThreadBudget::process().acquire_input(static_cast<int>(slots_.size()));
      threads = lease_.count();
    }
    // Open the whole first cycle now, so that every worker has a dataset to read ahead in.
    // The sequential machine would open the same input elements at the same positions.
    for (std::size_t k = 0; k < slots_.size() && input_; ++k) {
      if (!open(k)) break;
    }
    for (int i = 0; i < threads; ++i) workers_.push_back(start_pipeline_thread([this, i] { work(i); }));
  }

  void work(int index) {
    std::size_t scan = static_cast<std::size_t>(index) % slots_.size();
    for (;;) {
      std::shared_ptr<Slot> slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_work_.wait(lock, [&] {
          if (stop_) return true;
          for (std::size_t i = 0; i < slots_.size(); ++i) {  // the first slot needing elements from `scan` on
            const auto& s = slots_[(scan + i) % slots_.size()];
            if (s && !s->busy && !s->exhausted && static_cast<std::int64_t>(s->ahead.size()) < ahead_) {
              slot = s;
              scan = (scan + i + 1) % slots_.size();
              return true;
            }
          }
          return false;
        });
        if (stop_) return;
        slot->busy = true;
      }
      std::optional<Element> e;
      std::exception_ptr error;
      try {
        e = slot->it->next();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot->busy = false;
        if (e) {
          slot->ahead.push_back(std::move(*e));
        } else {
          slot->exhausted = true;
          slot->error = error;
          slot->it.reset();  // stop what runs below it, on this thread
        }
      }
      cv_ready_.notify_all();
      cv_work_.notify_all();
    }
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : workers_) {
      if (t.joinable()) t.join();
    }
    workers_.clear();
    slots_.assign(slots_.size(), nullptr);
    open_ = 0;
    input_.reset();
  }

  std::unique_ptr<Iterator> input_;  // consumer thread only; null once exhausted
  std::shared_ptr<const InterleaveFn> fn_;
  const std::int64_t block_, parallel_;
  std::vector<std::shared_ptr<Slot>> slots_;  // the cycle; guarded by mu_ in parallel mode
  const std::int64_t ahead_;                  // elements read ahead per slot
  std::size_t cursor_ = 0;
  std::int64_t in_block_ = 0;
  std::int64_t open_ = 0;
  std::int64_t opened_ = 0;  // input elements so far: the index errors name
  bool done_ = false;

  std::mutex mu_;
  std::condition_variable cv_work_, cv_ready_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
  ThreadBudget::Lease lease_;
};

class InterleaveNode final : public DatasetNode {
 public:
  InterleaveNode(NodePtr input, InterleaveFn fn, std::int64_t cycle, std::int64_t block, std::int64_t parallel)
      : input_(std::move(input)),
        fn_(std::make_shared<const InterleaveFn>(std::move(fn))),
        cycle_(cycle),
        block_(block),
        parallel_(parallel) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    const std::int64_t cycle = cycle_ == kAutotune ? ThreadBudget::process().cores() : cycle_;
    return std::make_unique<InterleaveIterator>(input_->make_iterator(), fn_, cycle, block_, parallel_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    return n == 0 || n == kInfiniteCardinality ? n : kUnknownCardinality;
  }
  std::string name() const override {
    return "interleave(cycle_length=" + std::to_string(cycle_) + ", block_length=" + std::to_string(block_) +
           ", num_parallel_calls=" + std::to_string(parallel_) + ")";
  }
  // With cycle_length autotuned the order depends on the machine's cores: so does the cache.
  std::string fingerprint_part() const override {
    const std::int64_t cycle = cycle_ == kAutotune ? ThreadBudget::process().cores() : cycle_;
    return "interleave(cycle_length=" + std::to_string(cycle) + ", block_length=" + std::to_string(block_) + ")";
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::shared_ptr<const InterleaveFn> fn_;
  std::int64_t cycle_, block_, parallel_;
};

}  // namespace

NodePtr make_interleave_node(NodePtr input, InterleaveFn fn, std::int64_t cycle_length, std::int64_t block_length,
                             std::int64_t num_parallel_calls) {
  LOCKSTEP_CHECK(fn != nullptr, "Dataset::interleave: the function is empty");
  LOCKSTEP_CHECK(cycle_length >= 1 || cycle_length == kAutotune,
                 "Dataset::interleave: cycle_length must be >= 1 or kAutotune (-1), got ", cycle_length);
  LOCKSTEP_CHECK(block_length >= 1, "Dataset::interleave: block_length must be >= 1, got ", block_length);
  LOCKSTEP_CHECK(num_parallel_calls >= 1 || num_parallel_calls == kAutotune,
                 "Dataset::interleave: num_parallel_calls must be >= 1 or kAutotune (-1), got ", num_parallel_calls);
  return std::make_shared<InterleaveNode>(std::move(input), std::move(fn), cycle_length, block_length,
                                          num_parallel_calls);
}

}  // namespace lockstep::data::detail
