// map: sequential on the iterating thread, or parallel on pipeline threads with a reorder
// buffer (deterministic) or a completion queue (not), optionally autotuned.
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "data/autotune.hpp"
#include "data/nodes.hpp"
#include "data/worker.hpp"
#include "lockstep/data/thread_budget.hpp"

namespace lockstep::data::detail {

namespace {

constexpr const char* kWho = "Dataset::map";

class SequentialMapIterator final : public Iterator {
 public:
  SequentialMapIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const MapFn> fn)
      : input_(std::move(input)), fn_(std::move(fn)) {}
  std::optional<Element> next() override {
    if (!input_) return std::nullopt;
    auto e = input_->next();
    if (!e) {
      input_.reset();
      return std::nullopt;
    }
    const std::int64_t index = index_++;
    try {
      return (*fn_)(std::move(*e));
    } catch (...) {
      input_.reset();
      std::rethrow_exception(function_error(kWho, index));
    }
  }

 private:
  std::unique_ptr<Iterator> input_;  // null once done
  std::shared_ptr<const MapFn> fn_;
  std::int64_t index_ = 0;
};

std::size_t element_bytes(const Element& e) {
  std::size_t n = 0;
  for (const auto& t : e) n += t.nbytes();
  return n;
}

class ParallelMapIterator final : public Iterator {
 public:
  ParallelMapIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const MapFn> fn, std::int64_t parallel,
                      bool deterministic)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        autotune_(parallel == kAutotune),
        deterministic_(deterministic),
        budget_(ThreadBudget::process()),
        max_threads_(autotune_ ? budget_.cores() : static_cast<int>(parallel)),
        tuner_(1) {}

  ~ParallelMapIterator() override { shutdown(); }

  std::optional<Element> next() override {
    if (finished_) return std::nullopt;
    if (workers_.empty()) start();
    Result r;
    double waited = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto t0 = HillClimb::Clock::now();
      cv_out_.wait(lock, [&] { return ready(); });
      waited = std::chrono::duration<double>(HillClimb::Clock::now() - t0).count();
      if (deterministic_) {
        auto it = results_.find(consumed_);
        if (it != results_.end()) {
          r = std::move(it->second);
          results_.erase(it);
        }
      } else if (!completed_.empty()) {
        r = std::move(completed_.front());
        completed_.pop_front();
      }
      if (r.value || r.error) {
        ++consumed_;
        --in_flight_;
      }
    }
    cv_in_.notify_all();
    if (r.error) {
      finished_ = true;
      shutdown();
      std::rethrow_exception(r.error);
    }
    if (!r.value) {
      finished_ = true;
      shutdown();
      return std::nullopt;
    }
    if (autotune_) tune(waited, *r.value);
    return std::move(r.value);
  }

 private:
  struct Result {
    std::optional<Element> value;
    std::exception_ptr error;
  };

  bool ready() const {
    if (deterministic_) {
      return results_.count(consumed_) != 0 || (input_done_ && consumed_ >= end_index_) ||
             (input_done_ && in_flight_ == 0);
    }
    return !completed_.empty() || (input_done_ && in_flight_ == 0);
  }

  void start() {
    int target = max_threads_;
    if (autotune_) {
      lease_ = budget_.acquire_input(max_threads_);
      target = lease_.count();
      tuner_.set_level(target);
    }
    std::lock_guard<std::mutex> lock(mu_);
    target_ = target;
    capacity_ = 2 * target;
    while (static_cast<int>(workers_.size()) < target_) spawn();
  }

  void spawn() {
    const int index = static_cast<int>(workers_.size());
    workers_.push_back(start_pipeline_thread([this, index] { work(index); }));
  }

  void tune(double waited, const Element& e) {
    if (item_bytes_ == 0) item_bytes_ = std::max<std::size_t>(1, element_bytes(e));
    const double busy = static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
    const bool can_grow = tuner_.level() < max_threads_;
    const auto step = tuner_.record(waited, busy, tuner_.level(), can_grow, lease_.should_shrink());
    if (step == HillClimb::Step::kGrow && lease_.try_grow()) {
      tuner_.set_level(tuner_.level() + 1);
    } else if (step == HillClimb::Step::kShrink && tuner_.level() > 1) {
      lease_.shrink();
      tuner_.set_level(tuner_.level() - 1);
    } else {
      return;
    }
    // The reorder buffer: two elements per thread keeps every thread busy despite jitter,
    // but never more than the byte budget allows.
    const std::size_t by_memory = std::max<std::size_t>(1, budget_.buffer_bytes() / item_bytes_);
    std::lock_guard<std::mutex> lock(mu_);
    target_ = tuner_.level();
    capacity_ = static_cast<std::int64_t>(std::min<std::size_t>(2 * static_cast<std::size_t>(target_), by_memory));
    capacity_ = std::max<std::int64_t>(capacity_, 1);
    while (static_cast<int>(workers_.size()) < target_) spawn();
    cv_in_.notify_all();
  }

  void work(int index) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_in_.wait(lock, [&] { return stop_ || input_done_ || (index < target_ && in_flight_ < capacity_); });
        if (stop_ || input_done_) return;
        ++in_flight_;
      }
      std::optional<Element> e;
      std::exception_ptr error;
      std::int64_t idx = -1;
      {
        std::lock_guard<std::mutex> lock(input_mu_);
        if (input_) {
          idx = pulled_++;
          try {
            e = input_->next();
          } catch (...) {
            error = std::current_exception();  // upstream's error, passed on as it is
          }
          if (!e) input_.reset();
        }
      }
      if (!e) {
        std::lock_guard<std::mutex> lock(mu_);
        // Only the worker that saw the input end (or fail, at idx) knows where it ended. One that
        // found it ended already (idx -1) may get here first: had it set the end (at 0), the
        // consumer would have stopped before the elements still in flight and the error, a
        // silently short pass.
        if (idx >= 0) {
          end_index_ = error ? idx + 1 : idx;
          input_done_ = true;
        }
        if (error) {
          store(idx, Result{std::nullopt, error});
        } else {
          --in_flight_;
        }
        cv_out_.notify_all();
        cv_in_.notify_all();
        return;
      }
      Result r;
      const auto t0 = HillClimb::Clock::now();
      try {
        r.value = (*fn_)(std::move(*e));
      } catch (...) {
        r.error = function_error(kWho, idx);
      }
      busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(HillClimb::Clock::now() - t0).count(),
                         std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        store(idx, std::move(r));
      }
      cv_out_.notify_one();
    }
  }

  void store(std::int64_t idx, Result r) {  // mu_ held
    if (deterministic_) {
      results_.emplace(idx, std::move(r));
    } else {
      completed_.push_back(std::move(r));
    }
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_in_.notify_all();
    for (auto& t : workers_) {
      if (t.joinable()) t.join();
    }
    std::lock_guard<std::mutex> lock(input_mu_);
    input_.reset();  // stops whatever threads run below, now rather than at destruction
  }

  std::mutex input_mu_;
  std::unique_ptr<Iterator> input_;  // guarded by input_mu_; null once exhausted
  std::int64_t pulled_ = 0;           // guarded by input_mu_: the next input element's index
  std::shared_ptr<const MapFn> fn_;
  const bool autotune_, deterministic_;
  ThreadBudget& budget_;
  const int max_threads_;
  ThreadBudget::Lease lease_;  // autotune only
  HillClimb tuner_;            // consumer thread only
  std::size_t item_bytes_ = 0;
  std::atomic<std::int64_t> busy_ns_{0};

  std::mutex mu_;
  std::condition_variable cv_in_, cv_out_;  // workers wait on cv_in_, the consumer on cv_out_
  std::map<std::int64_t, Result> results_;  // deterministic: the reorder buffer
  std::deque<Result> completed_;            // otherwise: in completion order
  std::int64_t in_flight_ = 0;              // taken by a worker, not yet consumed
  std::int64_t consumed_ = 0;
  std::int64_t end_index_ = 0;              // valid once input_done_
  std::int64_t capacity_ = 1;
  int target_ = 0;
  bool input_done_ = false;
  bool stop_ = false;

  std::vector<std::thread> workers_;  // consumer thread only
  bool finished_ = false;
};

class MapNode final : public DatasetNode {
 public:
  MapNode(NodePtr input, MapFn fn, std::int64_t parallel, bool deterministic)
      : input_(std::move(input)),
        fn_(std::make_shared<const MapFn>(std::move(fn))),
        parallel_(parallel),
        deterministic_(deterministic) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    if (parallel_ == 1) return std::make_unique<SequentialMapIterator>(input_->make_iterator(), fn_);
    return std::make_unique<ParallelMapIterator>(input_->make_iterator(), fn_, parallel_, deterministic_);
  }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override {
    return "map(num_parallel_calls=" + (parallel_ == kAutotune ? std::string("autotune") : std::to_string(parallel_)) +
           (deterministic_ ? ")" : ", deterministic=false)");
  }
  // The output does not depend on parallelism; order does when not deterministic.
  std::string fingerprint_part() const override { return deterministic_ ? "map" : "map(deterministic=false)"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::shared_ptr<const MapFn> fn_;  // shared with iterators, which may outlive the Dataset
  std::int64_t parallel_;
  bool deterministic_;
};

}  // namespace

NodePtr make_map_node(NodePtr input, MapFn fn, std::int64_t num_parallel_calls, bool deterministic) {
  LOCKSTEP_CHECK(fn != nullptr, "Dataset::map: the function is empty");
  LOCKSTEP_CHECK(num_parallel_calls >= 1 || num_parallel_calls == kAutotune,
                 "Dataset::map: num_parallel_calls must be >= 1 or kAutotune (-1), got ", num_parallel_calls);
  return std::make_shared<MapNode>(std::move(input), std::move(fn), num_parallel_calls, deterministic);
}

}  // namespace lockstep::data::detail
