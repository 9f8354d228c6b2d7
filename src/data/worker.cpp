#include "data/worker.hpp"
#include "core/thread_signals.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::data {

FunctionError::FunctionError(const std::string& transformation, std::int64_t element_index,
                             const std::string& original_message)
    : Error(transformation + ": the function threw on element " + std::to_string(element_index) +
            " (0-based, counted in this pass of its input): " + original_message),
      transformation_(transformation),
      element_index_(element_index),
      original_message_(original_message) {}

namespace detail {

ComputeContext& input_context() {
  // Leaked on purpose, as the default context is: tensors made here may outlive statics.
  static auto* ctx = new std::shared_ptr<ComputeContext>(make_compute_context(Device{DeviceKind::kCpu, 0}, 1));
  return **ctx;
}

std::thread start_pipeline_thread(std::function<void()> body) {
  return std::thread([body = std::move(body)] {
    ::lockstep::detail::block_stop_signals_on_this_thread();
    ComputeScope scope(input_context());
    body();
  });
}

void run_on_input_worker(int worker_index, std::function<void()> job) {
  struct Worker {
    std::mutex mu;
    std::condition_variable ready;
    std::deque<std::function<void()>> jobs;
  };
  // Leaked on purpose, their threads detached: a job may be queued until the process exits.
  static std::mutex workers_mu;
  static std::vector<Worker*> workers;
  Worker* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(workers_mu);
    const auto i = static_cast<std::size_t>(std::max(worker_index, 0));
    if (workers.size() <= i) workers.resize(i + 1, nullptr);
    if (!workers[i]) {
      auto* worker = new Worker;
      start_pipeline_thread([worker] {
        for (;;) {
          std::function<void()> next;
          {
            std::unique_lock<std::mutex> lock(worker->mu);
            worker->ready.wait(lock, [worker] { return !worker->jobs.empty(); });
            next = std::move(worker->jobs.front());
            worker->jobs.pop_front();
          }
          next();
        }
      }).detach();
      workers[i] = worker;
    }
    w = workers[i];
  }
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->jobs.push_back(std::move(job));
  }
  w->ready.notify_one();
}

std::exception_ptr function_error(const char* transformation, std::int64_t element_index) {
  try {
    throw;
  } catch (const FunctionError&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    try {
      throw FunctionError(transformation, element_index, e.what());
    } catch (...) {
      return std::current_exception();
    }
  } catch (...) {
    try {
      throw FunctionError(transformation, element_index, "an exception not derived from std::exception");
    } catch (...) {
      return std::current_exception();
    }
  }
}

}  // namespace detail
}  // namespace lockstep::data
