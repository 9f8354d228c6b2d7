#include "worker_agreement.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <utility>

#include "lockstep/core/error.hpp"

namespace lockstep::cli {

namespace {
// A record: 'C' then (length, bytes) for each key and value; or 'F' alone (this worker failed).
void put(std::string& out, const std::string& s) {
  const std::uint64_t n = s.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += s;
}

std::string encode(const RunConfig& config) {
  std::string out = "C";
  for (const auto& [key, value] : config) {
    put(out, key);
    put(out, value);
  }
  return out;
}

std::optional<RunConfig> decode(const std::string& record, int worker) {
  LOCKSTEP_CHECK_T(DistributedError, !record.empty() && (record[0] == 'C' || record[0] == 'F'), "worker ", worker,
                   " sent a start-up record that is not lockstep train's (another program or version?)");
  if (record[0] == 'F') return std::nullopt;
  RunConfig config;
  std::size_t at = 1;
  const auto take = [&]() {
    std::uint64_t n = 0;
    LOCKSTEP_CHECK_T(DistributedError, record.size() - at >= sizeof n, "worker ", worker,
                     "'s start-up record is truncated");
    std::memcpy(&n, record.data() + at, sizeof n);
    at += sizeof n;
    LOCKSTEP_CHECK_T(DistributedError, record.size() - at >= n, "worker ", worker, "'s start-up record is truncated");
    std::string s = record.substr(at, static_cast<std::size_t>(n));
    at += static_cast<std::size_t>(n);
    return s;
  };
  while (at < record.size()) {
    std::string key = take();
    config[key] = take();
  }
  return config;
}

std::string workers_list(const std::vector<int>& workers) {
  std::string out = workers.size() == 1 ? "worker " : "workers ";
  for (std::size_t i = 0; i < workers.size(); ++i) out += (i ? ", " : "") + std::to_string(workers[i]);
  return out;
}
}  // namespace

void check_workers_agree(const std::vector<std::optional<RunConfig>>& configs) {
  std::vector<int> failed;
  for (std::size_t w = 0; w < configs.size(); ++w)
    if (!configs[w]) failed.push_back(static_cast<int>(w));
  if (!failed.empty()) {
    // The failed worker shows its own error; the others say which worker stopped them.
    throw DistributedError(detail::concat(workers_list(failed), " failed a start-up check (",
                                          failed.size() == 1 ? "its" : "their",
                                          " error says which), so this worker stops too"));
  }
  std::map<std::string, bool> keys;
  for (const auto& c : configs)
    for (const auto& kv : *c) keys[kv.first] = true;
  std::string differences;
  for (const auto& [key, unused] : keys) {
    // The values in order of first appearance, each with the workers that have it.
    std::vector<std::pair<std::string, std::vector<int>>> values;
    for (std::size_t w = 0; w < configs.size(); ++w) {
      const auto it = configs[w]->find(key);
      const std::string v = it == configs[w]->end() ? std::string("(not given)") : it->second;
      auto same = std::find_if(values.begin(), values.end(), [&](const auto& p) { return p.first == v; });
      if (same == values.end()) values.push_back({v, {static_cast<int>(w)}});
      else same->second.push_back(static_cast<int>(w));
    }
    if (values.size() == 1) continue;
    differences += std::string(differences.empty() ? "" : "; ") + key + ": ";
    for (std::size_t i = 0; i < values.size(); ++i) {
      differences += (i ? ", " : "") + workers_list(values[i].second) +
                     (values[i].second.size() == 1 ? " has " : " have ") + values[i].first;
    }
  }
  LOCKSTEP_CHECK(differences.empty(), "workers disagree on ", differences,
                 " (every worker of an mpirun job must be started with the same flags and the same data)");
}

WorkerAgreement::WorkerAgreement(const distribute::Strategy& strategy)
    : strategy_(strategy), exceptions_(std::uncaught_exceptions()) {}

std::vector<std::optional<RunConfig>> WorkerAgreement::exchange(const RunConfig& config) {
  std::vector<std::optional<RunConfig>> configs;
  int w = 0;
  for (const auto& record : strategy_.gather_from_workers("the workers' start-up agreement", encode(config)))
    configs.push_back(decode(record, w++));
  return configs;
}

void WorkerAgreement::agree(const TrainArgs& args, std::int64_t global_batch, const std::string& data_signature) {
  // Whatever this throws, every worker is at the same exchange: none waits for another record.
  stop_ = true;
  if (strategy_.num_workers() == 1) return;
  RunConfig config = make_run_config(args, global_batch);
  // Beyond what a resumed run is compared on: what else shapes the model or the steps' collectives.
  config["--model"] = args.model;
  config["--num-classes"] = args.num_classes > 0 ? std::to_string(args.num_classes) : "inferred";
  config["--backup-every-steps"] = args.backup_every_steps > 0 ? std::to_string(args.backup_every_steps) : "epoch";
  config["the data"] = data_signature;
  check_workers_agree(exchange(config));
  stop_ = false;
}

void WorkerAgreement::ready() {
  stop_ = true;
  if (strategy_.num_workers() == 1) {
    settled_ = true;
    return;
  }
  check_workers_agree(exchange({}));
  settled_ = true;
}

WorkerAgreement::~WorkerAgreement() {
  if (stop_ || strategy_.num_workers() == 1 || std::uncaught_exceptions() <= exceptions_) return;
  try {
    (void)strategy_.gather_from_workers("the workers' start-up agreement", "F");
  } catch (...) {
    // This worker's own error is on its way; a failed exchange adds nothing to it.
  }
}

}  // namespace lockstep::cli
