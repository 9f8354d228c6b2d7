#pragma once
// What every pipeline thread shares: the compute context its tensor ops use, and how a user
// function's exception becomes a FunctionError.
#include <exception>
#include <functional>
#include <future>
#include <thread>

#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/data/dataset_node.hpp"
#include "lockstep/data/function_error.hpp"

namespace lockstep::data::detail {

/// A one-thread CPU context with its own allocator. Pipeline threads make it current so that
/// tensor ops in a map function run inline on that thread: the compute pools' parallel_for
/// serves one caller at a time, and input threads must never take cores from training.
ComputeContext& input_context();

/// A thread running `body` with input_context() current.
std::thread start_pipeline_thread(std::function<void()> body);

/// Runs `job` on input worker `worker_index`: a pipeline thread of the process, started on its
/// first use, that runs its jobs in the order given (one per replica slot, so that replicas'
/// gathers run side by side as they did on their own threads). A job must not throw.
void run_on_input_worker(int worker_index, std::function<void()> job);

/// batch.gather_stored_into(begin, end, into) on the input worker, ahead of its use and off the
/// calling thread: a replica on a GPU has its next slice gathered (by input worker
/// `worker_index`, its slot's) while it queues a step, into its staging blocks where it has them.
/// get() waits for the rows, and throws what the gather threw.
std::future<Element> gather_stored_ahead(const RowBatch& batch, std::int64_t begin, std::int64_t end,
                                         Element into = {}, int worker_index = 0);

/// Call inside a catch block around a user function: the exception to report, a FunctionError
/// naming `transformation` and `element_index` (an exception that already is one, from a
/// pipeline nested in the function, passes unchanged).
std::exception_ptr function_error(const char* transformation, std::int64_t element_index);

}  // namespace lockstep::data::detail
