#pragma once
// What the distribute layer needs from the data layer: which slice of the input a pipeline
// reads (tf.distribute.InputContext), and how a global batch splits across replicas.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/dataset_node.hpp"

namespace lockstep::data {

/// One input pipeline's place in a distributed job: pipeline input_pipeline_id of
/// num_input_pipelines (one per worker, usually), feeding num_replicas_in_sync replicas in all.
struct InputContext {
  int num_input_pipelines = 1;
  int input_pipeline_id = 0;
  int num_replicas_in_sync = 1;

  /// global_batch_size / num_replicas_in_sync; ValueError unless it divides evenly (as
  /// tf.distribute), naming both numbers.
  std::int64_t get_per_replica_batch_size(std::int64_t global_batch_size) const;
  /// ValueError unless 0 <= input_pipeline_id < num_input_pipelines and all counts >= 1.
  void validate() const;
};

/// Splits a global batch into num_replicas per-replica batches along dimension 0, as evenly as
/// it goes: the first (rows % num_replicas) replicas get one row more, and a replica may get
/// 0 rows (a batch of 3 over 4 replicas). Zero-copy: every tensor is a Tensor::slice view on
/// the global batch's storage. Every component must have rank >= 1 and the same first
/// dimension (ValueError naming the component otherwise).
std::vector<Element> split_batch_for_replicas(const Element& global_batch, int num_replicas);
/// Throws unless every component of the batch has a first dimension, all of one length: what
/// split_batch_for_replicas checks before it splits.
void check_splittable(const Element& global_batch, int num_replicas);
/// The rows [first, second) of a batch of `rows` that replica `replica` gets under that rule.
std::pair<std::int64_t, std::int64_t> replica_rows(std::int64_t rows, int num_replicas, int replica);

/// The files of shard `index` of `num_shards`: file i goes to shard i % num_shards, so every
/// worker reads whole files and the shards partition the list. ValueError when there are fewer
/// files than shards (a shard would be empty: shard the data with Dataset::shard instead).
std::vector<std::string> shard_files(const std::vector<std::string>& files, int num_shards, int index);

}  // namespace lockstep::data
