#pragma once
// What fit reads its batches from: a dataset's elements, or -- where the replicas keep every
// core busy -- its batches of rows still in their source tensors (data::RowBatch), so that each
// replica gathers its own slice on its own core instead of a pipeline thread copying the whole
// batch on a core that a replica needs (issue 9: 2 replicas on 2 cores lost ~10% of their steps
// to that copy and to waiting for the thread that made it).
#include <cstdint>
#include <memory>
#include <optional>

#include "lockstep/data/dataset.hpp"
#include "lockstep/core/shape.hpp"

namespace lockstep::detail {

/// One global batch: tensors, or rows to gather. Component 0 is x, 1 is y.
class FitBatch {
 public:
  explicit FitBatch(data::Element tensors) : tensors_(std::move(tensors)) {}
  explicit FitBatch(data::RowBatch rows) : rows_(std::move(rows)) {}

  /// The tensors, or null for a batch of rows (gathered by part()).
  const data::Element* tensors() const { return rows_ ? nullptr : &tensors_; }
  std::size_t components() const { return rows_ ? rows_->sources->size() : tensors_.size(); }
  /// Examples: the first dimension of component 0 (0 for a scalar).
  std::int64_t size() const;
  /// The shape of component c of the whole batch.
  Shape shape(std::size_t c) const;
  /// Rows [begin, end) of every component, gathered on the calling thread's context for a
  /// batch of rows (a view for tensors).
  data::Element part(std::int64_t begin, std::int64_t end) const;

 private:
  data::Element tensors_;
  std::optional<data::RowBatch> rows_;
};

/// One pass over a dataset as FitBatches: row batches when asked for and the pipeline has
/// them (data::Dataset::make_row_batch_iterator), its elements otherwise. Either way a pass
/// of the same dataset yields the same examples in the same order.
class FitInput {
 public:
  FitInput(const data::Dataset& dataset, bool row_batches);
  std::optional<FitBatch> next();
  /// Drops up to n batches (those trained before a resume).
  void skip(std::int64_t n);

 private:
  std::unique_ptr<data::Iterator> elements_;
  std::unique_ptr<data::RowBatchIterator> rows_;
};

}  // namespace lockstep::detail
