#include "lockstep/data/input_context.hpp"

#include <algorithm>

namespace lockstep::data {

void InputContext::validate() const {
  LOCKSTEP_CHECK(num_input_pipelines >= 1 && num_replicas_in_sync >= 1,
                 "InputContext: num_input_pipelines and num_replicas_in_sync must be >= 1, got ", num_input_pipelines,
                 " and ", num_replicas_in_sync);
  LOCKSTEP_CHECK(input_pipeline_id >= 0 && input_pipeline_id < num_input_pipelines,
                 "InputContext: input_pipeline_id must be in [0, ", num_input_pipelines, "), got ",
                 input_pipeline_id);
}

std::int64_t InputContext::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  validate();
  LOCKSTEP_CHECK(global_batch_size >= 1, "InputContext::get_per_replica_batch_size: the global batch size must be ",
                 ">= 1, got ", global_batch_size);
  LOCKSTEP_CHECK(global_batch_size % num_replicas_in_sync == 0, "InputContext::get_per_replica_batch_size: ",
                 "the global batch size ", global_batch_size, " is not divisible by the ", num_replicas_in_sync,
                 " replicas in sync; use a multiple of ", num_replicas_in_sync);
  return global_batch_size / num_replicas_in_sync;
}

void check_splittable(const Element& global_batch, int num_replicas) {
  LOCKSTEP_CHECK(num_replicas >= 1, "split_batch_for_replicas: num_replicas must be >= 1, got ", num_replicas);
  LOCKSTEP_CHECK(!global_batch.empty(), "split_batch_for_replicas: the batch has no components");
  for (std::size_t c = 0; c < global_batch.size(); ++c) {
    const Tensor& t = global_batch[c];
    LOCKSTEP_CHECK(t.defined() && t.rank() >= 1, "split_batch_for_replicas: component ", c,
                   " is undefined or a scalar; a batch needs a first dimension to split");
    LOCKSTEP_CHECK(t.dim(0) == global_batch[0].dim(0), "split_batch_for_replicas: component ", c, " has shape ",
                   t.shape().str(), " but component 0 has ", global_batch[0].shape().str(),
                   "; every component of a batch must have the same number of rows");
  }
}

std::vector<Element> split_batch_for_replicas(const Element& global_batch, int num_replicas) {
  check_splittable(global_batch, num_replicas);
  const std::int64_t rows = global_batch[0].dim(0);
  std::vector<Element> out(static_cast<std::size_t>(num_replicas));
  for (int r = 0; r < num_replicas; ++r) {
    const auto [begin, end] = replica_rows(rows, num_replicas, r);
    for (const auto& t : global_batch) out[r].push_back(t.slice(begin, end));
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> replica_rows(std::int64_t rows, int num_replicas, int replica) {
  LOCKSTEP_CHECK(num_replicas >= 1 && replica >= 0 && replica < num_replicas && rows >= 0, "replica_rows: replica ",
                 replica, " of ", num_replicas, " (", rows, " rows) does not exist");
  const std::int64_t base = rows / num_replicas, extra = rows % num_replicas;
  const std::int64_t begin = replica * base + std::min<std::int64_t>(replica, extra);
  return {begin, begin + base + (replica < extra ? 1 : 0)};
}

std::vector<std::string> shard_files(const std::vector<std::string>& files, int num_shards, int index) {
  LOCKSTEP_CHECK(num_shards >= 1, "shard_files: num_shards must be >= 1, got ", num_shards);
  LOCKSTEP_CHECK(index >= 0 && index < num_shards, "shard_files: index must be in [0, ", num_shards, "), got ", index);
  LOCKSTEP_CHECK(files.size() >= static_cast<std::size_t>(num_shards), "shard_files: ", files.size(),
                 " files cannot be sharded by file over ", num_shards, " shards (some would be empty); ",
                 "shard by element with Dataset::shard instead");
  std::vector<std::string> out;
  for (std::size_t i = static_cast<std::size_t>(index); i < files.size(); i += static_cast<std::size_t>(num_shards)) {
    out.push_back(files[i]);
  }
  return out;
}

}  // namespace lockstep::data
