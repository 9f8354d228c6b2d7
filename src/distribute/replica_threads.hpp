#pragma once
// The replica threads of a Strategy. Replica 0 runs on the caller's thread (no hand-off, and one
// replica costs nothing over no strategy); replicas 1..N-1 each own a thread that waits for work.
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "backend/thread_pool.hpp"
#include "lockstep/distribute/strategy.hpp"

namespace lockstep::distribute {

struct Strategy::Replicas {
  struct Worker {
    std::thread thread;
    std::atomic<std::uint64_t> job{0};
  };
  Strategy* owner = nullptr;
  std::vector<std::unique_ptr<Worker>> workers;  // index r-1 for replica r
  const std::function<void(ReplicaContext&)>* fn = nullptr;
  std::atomic<int> remaining{0};
  std::atomic<bool> stop{false};
  std::atomic<int> sleepers{0};
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::mutex err_mu;
  std::exception_ptr first_error;
  int first_error_replica = -1;
  bool broken = false;
  std::string broken_by;  // "replica R failed: ...", the failure after which a replica never stopped

  void record_error(int r, std::exception_ptr e, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(err_mu);
      if (!first_error) {
        first_error = e;
        first_error_replica = r;
      }
    }
    owner->communicator(r).abort(what);
  }

  void execute(int r) {
    ReplicaContext ctx(*owner, r);
    backend::ContextGuard guard(owner->context(r));
    // Its waits for peers (in collectives) run chunks of its context's idle work.
    const backend::ThreadPool::HelperScope helper(&owner->context(r).pool());
    const CurrentReplicaScope current(&ctx);
    try {
      (*fn)(ctx);
    } catch (const std::exception& e) {
      record_error(r, std::current_exception(), e.what());
    } catch (...) {
      record_error(r, std::current_exception(), "unknown exception");
    }
    // A gradient exchange lives within one step: one that this step began and did not finish
    // (it threw during backward) must not be taken for the next step's.
    owner->update_->abandon(r);
  }

  void worker_loop(int r) {
    Worker& w = *workers[static_cast<std::size_t>(r - 1)];
    const auto& cpus = owner->context(r).cpus();
    if (!cpus.empty()) backend::pin_current_thread(cpus[0]);
    std::uint64_t seen = 0;
    // Between steps it gathers its slice of the next batch, if one was offered.
    const backend::ThreadPool::HelperScope helper(&owner->context(r).pool());
    for (;;) {
      // Spin briefly for the next step, then sleep.
      for (int i = 0; i < 4000 && w.job.load() == seen && !stop.load(); ++i) {
        if (backend::help_idle_work()) i = 0;
        else if (i > 100) std::this_thread::yield();
      }
      if (w.job.load() == seen && !stop.load()) {
        std::unique_lock<std::mutex> lock(mu);
        sleepers.fetch_add(1);
        cv_work.wait(lock, [&] { return w.job.load() != seen || stop.load(); });
        sleepers.fetch_sub(1);
      }
      if (stop.load()) return;
      seen = w.job.load();
      execute(r);
      if (remaining.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mu);
        cv_done.notify_all();
      }
    }
  }

  // Stops and joins the threads started so far (all of them, or fewer when starting one failed).
  void stop_threads() {
    stop.store(true);
    {
      std::lock_guard<std::mutex> lock(mu);
      cv_work.notify_all();
    }
    for (auto& w : workers) {
      if (!w->thread.joinable()) continue;
      // A replica that never finished (reported by run()) cannot be joined without hanging.
      if (broken && remaining.load() > 0) w->thread.detach();
      else w->thread.join();
    }
  }
};

}  // namespace lockstep::distribute
