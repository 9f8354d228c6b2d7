#pragma once
// What fit reads its batches from: a dataset's elements, or -- where the replicas keep every
// core busy -- its batches of rows still in their source tensors (data::RowBatch), so that each
// replica gathers its own slice on its own core instead of a pipeline thread copying the whole
// batch on a core that a replica needs (issue 9: 2 replicas on 2 cores lost ~10% of their steps
// to that copy and to waiting for the thread that made it).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lockstep/data/dataset.hpp"
#include "lockstep/core/shape.hpp"
#include "lockstep/tensor/device_upload.hpp"

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
  /// batch of rows (a view for tensors). `slot` (a replica) takes its gather_ahead of that
  /// range if it started one.
  data::Element part(std::int64_t begin, std::int64_t end, int slot = 0) const;

  /// Makes room for `slots` gathers or uploads ahead (on the calling thread, before the replicas
  /// start them concurrently, each in its own slot).
  void make_slots(int slots) const;
  /// A batch of rows: starts slot's gather of rows [begin, end) on the calling thread's
  /// context (data::RowBatch::gather_ahead, with `caller_waits`), for part() to take. Nothing
  /// for tensors, nor where no thread would wait (one thread, and it does not wait for peers).
  void gather_ahead(int slot, std::int64_t begin, std::int64_t end, bool caller_waits) const;
  /// Tensors, for a calling thread that computes on a GPU (the caller decides): reserves device
  /// memory there for slot's rows [begin, end) and marks the device's work so far
  /// (DeviceUpload). Before the step that the copy is to run beside is queued.
  void reserve_upload(int slot, std::int64_t begin, std::int64_t end) const;
  /// After that step is queued: starts the copy, for part() to take.
  void start_upload(int slot) const;
  /// Whether slot has a started upload for part() to take.
  bool uploaded(int slot) const;

 private:
  data::Element tensors_;
  std::optional<data::RowBatch> rows_;
  // Gathers and uploads ahead by slot; shared by the copies of this batch.
  struct Upload {
    std::int64_t begin, end;
    DeviceUpload copy;
  };
  mutable std::shared_ptr<std::vector<std::optional<data::PendingRows>>> ahead_;
  mutable std::shared_ptr<std::vector<std::optional<Upload>>> uploads_;
};

/// One pass over a dataset as FitBatches: row batches when asked for and the pipeline has
/// them (data::Dataset::make_row_batch_iterator), its elements otherwise. Either way a pass
/// of the same dataset yields the same examples in the same order.
class FitInput {
 public:
  /// `peek_elements`: peek() reads elements ahead too (for uploads ahead to a GPU).
  FitInput(const data::Dataset& dataset, bool row_batches, bool peek_elements = false);
  std::optional<FitBatch> next();
  /// The batch next() will return, read ahead, where it is a batch of rows (those come from
  /// index work, never a wait on a map) or with `peek_elements`; null otherwise or at the end
  /// of the pass.
  const FitBatch* peek();
  /// Drops up to n batches (those trained before a resume).
  void skip(std::int64_t n);

 private:
  std::unique_ptr<data::Iterator> elements_;
  std::unique_ptr<data::RowBatchIterator> rows_;
  std::optional<FitBatch> ahead_;
  bool peek_elements_ = false;
  bool ended_ = false;
};

}  // namespace lockstep::detail
