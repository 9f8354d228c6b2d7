// prefetch: a producer thread runs the pipeline below, a bounded buffer ahead of the consumer.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "data/autotune.hpp"
#include "data/nodes.hpp"
#include "data/worker.hpp"
#include "lockstep/data/thread_budget.hpp"

namespace lockstep::data::detail {

namespace {

// An autotuned buffer never grows past this many elements, whatever the byte budget allows:
// past a few dozen, a larger buffer only hides a producer that is slower on average.
constexpr std::int64_t kMaxAutotuneBuffer = 64;

class PrefetchIterator final : public Iterator {
 public:
  PrefetchIterator(std::unique_ptr<Iterator> input, std::int64_t buffer_size)
      : input_(std::move(input)),
        autotune_(buffer_size == kAutotune),
        capacity_(autotune_ ? 2 : buffer_size),
        tuner_(static_cast<int>(capacity_)) {}

  ~PrefetchIterator() override { shutdown(); }

  std::optional<Element> next() override {
    if (finished_) return std::nullopt;
    if (!thread_.joinable()) thread_ = start_pipeline_thread([this] { produce(); });
    std::optional<Element> e;
    std::exception_ptr error;
    double waited = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto t0 = HillClimb::Clock::now();
      cv_out_.wait(lock, [&] { return !buffer_.empty() || done_; });
      waited = std::chrono::duration<double>(HillClimb::Clock::now() - t0).count();
      if (!buffer_.empty()) {
        e = std::move(buffer_.front());
        buffer_.pop_front();
      } else {
        error = error_;
      }
    }
    cv_in_.notify_one();
    if (!e) {
      finished_ = true;
      shutdown();
      if (error) std::rethrow_exception(error);
      return std::nullopt;
    }
    if (autotune_) tune(waited, *e);
    return e;
  }

 private:
  void produce() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_in_.wait(lock, [&] { return stop_ || static_cast<std::int64_t>(buffer_.size()) < capacity_; });
        if (stop_) return;
      }
      std::optional<Element> e;
      std::exception_ptr error;
      const auto t0 = HillClimb::Clock::now();
      try {
        e = input_->next();
      } catch (...) {
        error = std::current_exception();
      }
      busy_ += std::chrono::duration<double>(HillClimb::Clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(mu_);
      if (e) {
        buffer_.push_back(std::move(*e));
        producer_busy_ = busy_;
      } else {
        done_ = true;
        error_ = error;
      }
      cv_out_.notify_one();
      if (done_) return;
    }
  }

  void tune(double waited, const Element& e) {
    if (item_bytes_ == 0) {
      for (const auto& t : e) item_bytes_ += t.nbytes();
      item_bytes_ = std::max<std::size_t>(item_bytes_, 1);
    }
    const auto most = std::min<std::int64_t>(
        kMaxAutotuneBuffer, static_cast<std::int64_t>(ThreadBudget::process().buffer_bytes() / item_bytes_));
    double busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy = producer_busy_;
    }
    const auto step = tuner_.record(waited, busy, 1, tuner_.level() < most, false);
    if (step == HillClimb::Step::kGrow) {
      tuner_.set_level(tuner_.level() + 1);
    } else if (step == HillClimb::Step::kShrink && tuner_.level() > 2) {
      // Never below double buffering: with one slot every element is a hand-off to the
      // producer thread, which then has to win a core from the training threads (measured:
      // 84 vs 2000 steps/s for the flagship on 2 replicas).
      tuner_.set_level(tuner_.level() - 1);
    } else {
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      capacity_ = tuner_.level();
    }
    cv_in_.notify_one();
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_in_.notify_all();
    if (thread_.joinable()) thread_.join();
    input_.reset();  // the thread is gone: stop what runs below now
    buffer_.clear();
  }

  std::unique_ptr<Iterator> input_;  // the producer's alone while it runs
  const bool autotune_;
  double busy_ = 0;  // producer thread only

  std::mutex mu_;
  std::condition_variable cv_in_, cv_out_;
  std::deque<Element> buffer_;
  std::int64_t capacity_;
  double producer_busy_ = 0;
  bool done_ = false;
  bool stop_ = false;
  std::exception_ptr error_;

  std::thread thread_;
  HillClimb tuner_;  // consumer thread only
  std::size_t item_bytes_ = 0;
  bool finished_ = false;
};

class PrefetchNode final : public DatasetNode {
 public:
  PrefetchNode(NodePtr input, std::int64_t buffer_size) : input_(std::move(input)), buffer_size_(buffer_size) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    if (buffer_size_ == 0) return input_->make_iterator();
    return std::make_unique<PrefetchIterator>(input_->make_iterator(), buffer_size_);
  }
  // A row batch is only its indices: nothing worth a thread to produce ahead.
  bool row_batches() const override { return input_->row_batches(); }
  std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const override {
    return input_->make_row_batch_iterator();
  }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override {
    return "prefetch(buffer_size=" + (buffer_size_ == kAutotune ? std::string("autotune") : std::to_string(buffer_size_)) +
           ")";
  }
  std::string fingerprint_part() const override { return "prefetch"; }  // changes when, not what
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::int64_t buffer_size_;
};

}  // namespace

NodePtr make_prefetch_node(NodePtr input, std::int64_t buffer_size) {
  LOCKSTEP_CHECK(buffer_size >= 0 || buffer_size == kAutotune,
                 "Dataset::prefetch: buffer_size must be >= 0 or kAutotune (-1), got ", buffer_size);
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace lockstep::data::detail
