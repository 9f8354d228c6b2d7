#pragma once
// Test helper: a collective group's local members, each on a thread of its own.
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "lockstep/lockstep.hpp"

namespace lockstep::distribute {

// Runs fn(rank, communicator) on one thread per member, each on a compute context of its own
// (as a strategy's replicas: a context's pool serves one thread at a time); returns what each
// threw (or null).
inline std::vector<std::exception_ptr> run_members(CollectiveGroup& group,
                                                   const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(group.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      const auto context = make_compute_context(Device{DeviceKind::kCpu, r}, 1);
      ComputeScope scope(*context);
      try {
        fn(r, group.member(r));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace lockstep::distribute
