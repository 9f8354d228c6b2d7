// Strategy::gather_from_workers: what the workers check at start-up (that they run alike) goes
// over the job's transport, as the strategy's own set-up does (device_layout.cpp), with tags
// above the collective groups' (multi_worker_group.cpp: 1..32000) and the layout's (32500).
// (Strategy::gather_int_from_workers: fit's stop-request check at each step boundary.)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "distribute/worker_transport.hpp"
#include "lockstep/distribute/strategy.hpp"

namespace lockstep::distribute {

std::vector<std::string> Strategy::gather_from_workers(const std::string& what, const std::string& mine) const {
  if (num_workers_ == 1) return {mine};
  constexpr int kSizeTag = 32501;
  constexpr int kBytesTag = 32502;
  WorkerTransport& world = WorkerTransport::world();
  const std::chrono::milliseconds timeout = group_->timeout();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // all_to_all moves as many bytes from every worker: the lengths first, then the strings
  // padded to the longest.
  WorkerTransport::Bytes size(sizeof(std::uint64_t));
  const std::uint64_t n = mine.size();
  std::memcpy(size.data(), &n, sizeof n);
  std::vector<std::uint64_t> sizes;
  std::uint64_t longest = 0;
  for (const auto& theirs : world.all_to_all(kSizeTag, size, deadline, timeout, what)) {
    std::uint64_t m = 0;
    std::memcpy(&m, theirs.data(), sizeof m);
    sizes.push_back(m);
    longest = std::max(longest, m);
  }
  WorkerTransport::Bytes padded(static_cast<std::size_t>(longest));
  if (!mine.empty()) std::memcpy(padded.data(), mine.data(), mine.size());
  std::vector<std::string> all;
  std::size_t j = 0;
  for (const auto& theirs : world.all_to_all(kBytesTag, padded, deadline, timeout, what)) {
    all.emplace_back(reinterpret_cast<const char*>(theirs.data()), static_cast<std::size_t>(sizes[j++]));
  }
  return all;
}

std::vector<std::int64_t> Strategy::gather_int_from_workers(const std::string& what, std::int64_t mine) const {
  if (num_workers_ == 1) return {mine};
  constexpr int kIntTag = 32503;
  WorkerTransport& world = WorkerTransport::world();
  const std::chrono::milliseconds timeout = group_->timeout();
  WorkerTransport::Bytes bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  std::vector<std::int64_t> all;
  for (const auto& theirs : world.all_to_all(kIntTag, bytes, std::chrono::steady_clock::now() + timeout, timeout, what)) {
    std::int64_t v = 0;
    std::memcpy(&v, theirs.data(), sizeof v);
    all.push_back(v);
  }
  return all;
}

void Strategy::announce_failure(const std::string& why) const noexcept {
  if (num_workers_ == 1) return;
  try {
    WorkerTransport::world().announce_failure(why);
  } catch (...) {
    // No transport to tell the others through: they find this worker gone.
  }
}

}  // namespace lockstep::distribute
