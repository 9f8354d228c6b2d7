#include "distribute/replica_threads.hpp"

#include <algorithm>
#include <system_error>

#include "backend/context.hpp"
#include "backend/kernels.hpp"
#include "core/thread_signals.hpp"

namespace lockstep::distribute {

namespace {
// Logical replicas of one GPU: the k-th replica of a device (k > 0) computes on stream k of it
// while a step runs (`own`), and on stream 0, which every context of the device shares, between
// steps, so that what the host does between steps (creating, assigning and reading variables)
// runs in the order it is issued, as on one stream. use_stream orders each switch after the work
// queued before it (no host wait); within the step the collectives' barriers order the replicas.
// Each replica's context has its own error mark while the step runs (backend/error_marks.hpp):
// a replica's read raises its own check's error, and the driver's reads after the step every one's.
std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

void use_own_streams(const std::vector<Device>& devices, Strategy& strategy, bool own) {
  for (std::size_t r = 0; r < devices.size(); ++r) strategy.context(static_cast<int>(r)).set_own_marks(own);
  for (std::size_t r = 1; r < devices.size(); ++r) {
    const auto& ops = backend::device_ops(devices[r].kind);
    const auto k = std::count(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(r), devices[r]);
    if (ops.use_stream && k > 0) ops.use_stream(strategy.context(static_cast<int>(r)), own ? static_cast<int>(k) : 0);
  }
}
}  // namespace

void Strategy::start_replica_threads() {
  const int n = num_local_replicas();
  replicas_->owner = this;
  for (int r = 1; r < n; ++r) {
    replicas_->workers.push_back(std::make_unique<Replicas::Worker>());
  }
  for (int r = 1; r < n; ++r) {
    try {
      replicas_->workers[static_cast<std::size_t>(r - 1)]->thread = std::thread([this, r] {
        ::lockstep::detail::block_stop_signals_on_this_thread();
        replicas_->worker_loop(r);
      });
    } catch (const std::system_error& e) {
      // Out of threads or address space: the threads already started must be stopped and joined
      // here (no destructor runs for a half-made object, and a joinable std::thread that is
      // destroyed calls std::terminate).
      replicas_->stop_threads();
      throw DistributedError("cannot start the thread of replica " + std::to_string(r) + ": " + e.what() + " (" +
                             std::to_string(n) + " replicas asked for, " + std::to_string(r) +
                             " started); ask for fewer devices or raise the process's limits (ulimit -u, ulimit -v)");
    }
  }
}

Strategy::~Strategy() {
  Replicas& R = *replicas_;
  if (R.broken) {
    // A replica that did not stop after a failure gets the timeout once more to finish: one that
    // does is joined; one left running past it would resume in a destroyed strategy.
    std::unique_lock<std::mutex> lock(R.mu);
    R.cv_done.wait_for(lock, group_->timeout(), [&] { return R.remaining.load() == 0; });
  }
  R.stop_threads();
}

void Strategy::run_on_replicas(const std::function<void(ReplicaContext&)>& fn) {
  Replicas& R = *replicas_;
  LOCKSTEP_CHECK_T(DistributedError, !R.broken, name(),
                   ": a replica of this strategy never finished an earlier step (", R.broken_by,
                   "); make a new strategy");
  LOCKSTEP_CHECK_T(DistributedError, R.remaining.load() == 0, name(), "::run is not reentrant");
  group_->reset();
  R.first_error = nullptr;
  R.first_error_replica = -1;
  R.fn = &fn;
  use_own_streams(devices_, *this, true);  // before any replica queues work
  const int n = num_local_replicas();
  R.remaining.store(n - 1);
  for (auto& w : R.workers) w->job.fetch_add(1);
  if (R.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(R.mu);
    R.cv_work.notify_all();
  }
  R.execute(0);
  // Wait for the other replicas. Without a failure there is no deadline (a step may be long);
  // after one, the others are released from their collectives and must stop within the timeout.
  {
    const backend::ThreadPool::HelperScope helper(&context(0).pool());
    for (int i = 0; i < 20000 && R.remaining.load() > 0; ++i) {
      if (backend::help_idle_work()) i = 0;
      else if (i > 100) std::this_thread::yield();
    }
  }
  if (R.remaining.load() > 0) {
    std::unique_lock<std::mutex> lock(R.mu);
    for (;;) {
      const bool failed = group_->failed();
      const auto deadline = failed ? group_->timeout() : std::chrono::milliseconds(200);
      const bool done = R.cv_done.wait_for(lock, deadline, [&] { return R.remaining.load() == 0; });
      if (done) break;
      if (failed) {
        // The failure that began it is named here and by every later run: it is the one to fix.
        R.broken = true;
        {
          std::lock_guard<std::mutex> err(R.err_mu);  // the unstopped replica may still record one
          R.broken_by = "replica " + std::to_string(R.first_error_replica) + " failed: " + what_of(R.first_error);
        }
        throw DistributedError(name() + ": " + std::to_string(R.remaining.load()) +
                               " replica(s) did not stop within " + std::to_string(group_->timeout().count()) +
                               " ms after " + R.broken_by + "; the strategy is unusable");
      }
    }
  }
  R.fn = nullptr;
  ++steps_run_;
  try {
    use_own_streams(devices_, *this, false);  // every replica is done queueing
  } catch (...) {
    if (!R.first_error) throw;  // else the replica's error is the one to report
  }
  if (R.first_error) {
    const std::string what = what_of(R.first_error);
    throw ReplicaError(R.first_error_replica,
                       "replica " + std::to_string(R.first_error_replica) + " of " + std::to_string(n) +
                           " (" + devices_[static_cast<std::size_t>(R.first_error_replica)].str() + ") failed: " + what,
                       R.first_error);
  }
}

}  // namespace lockstep::distribute
