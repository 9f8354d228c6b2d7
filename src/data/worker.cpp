#include "data/worker.hpp"
#include "core/thread_signals.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

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

void run_on_input_worker(std::function<void()> job) {
  struct Worker {
    std::mutex mu;
    std::condition_variable ready;
    std::deque<std::function<void()>> jobs;
  };
  // Leaked on purpose, its thread detached: a job may be queued until the process exits.
  static Worker* w = [] {
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
    return worker;
  }();
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
