#pragma once
// A distributed dataset's step (DistributedBatch) and the global batch its slices are cut from
// (GlobalBatch). A global batch's rows may still be in their source tensors (data::RowBatch):
// each replica then gathers its own slice on its own thread, instead of a pipeline thread
// copying the whole batch on a core that a replica needs (issue 9: 2 replicas on 2 cores lost
// ~10% of their steps to that copy and to waiting for the thread that made it). While a step
// runs, each replica prepares its slice of the batch after it where the iterator knows that one:
// - on a CPU it starts gathering it (GlobalBatch::gather_ahead), which its pool's workers copy
//   while they would wait between ops;
// - on a GPU it copies it to the device beside the step (TF's prefetch_to_device): memory is
//   reserved before the step is queued and the copy started after (reserve_upload,
//   start_upload), so that it runs on the copy stream while the step computes; the input
//   worker gathers the rows meanwhile, off the replica's thread. Rows travel as
//   their source tensors store them (uint8 pixels: a quarter of the floats' bytes) and the
//   pipeline's cast_and_scale is done on the device when the step takes them, same rule, same bits.
// fit and custom loops (strategy.run(fn, batch)) read their input this one way.
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include "lockstep/core/shape.hpp"
#include "lockstep/data/dataset.hpp"
#include "lockstep/tensor/device_upload.hpp"

namespace lockstep::distribute {

/// One global batch: tensors, or rows to gather.
class GlobalBatch {
 public:
  explicit GlobalBatch(data::Element tensors) : tensors_(std::move(tensors)) {}
  /// `gather_on_worker`: the rows of an upload ahead are gathered by the input worker
  /// (data::RowBatch::gather_stored_ahead), not on the replica's thread.
  /// `gather_into_staging`: rows are gathered straight into the staging blocks that the copy to
  /// the device reads (DeviceUpload::stage), one host copy fewer; false: into host memory, then
  /// copied into the blocks (for comparisons: the same bits either way).
  explicit GlobalBatch(data::RowBatch rows, bool gather_on_worker = false, bool gather_into_staging = true)
      : rows_(std::move(rows)), gather_on_worker_(gather_on_worker), gather_into_staging_(gather_into_staging) {}

  /// The tensors, or null for a batch of rows (gathered by part()).
  const data::Element* tensors() const { return rows_ ? nullptr : &tensors_; }
  std::size_t components() const { return rows_ ? rows_->sources->size() : tensors_.size(); }
  /// Examples: the first dimension of component 0 (0 for a scalar).
  std::int64_t size() const;
  /// The shape of component c of the whole batch.
  Shape shape(std::size_t c) const;
  /// Rows [begin, end) of every component, gathered on the calling thread's context for a
  /// batch of rows (a view for tensors). `slot` (a replica) takes its gather or upload ahead
  /// of that range if it started one.
  data::Element part(std::int64_t begin, std::int64_t end, int slot = 0) const;

  /// Makes room for `slots` gathers or uploads ahead (on the calling thread, before the replicas
  /// start them concurrently, each in its own slot).
  void make_slots(int slots) const;
  /// A batch of rows: starts slot's gather of rows [begin, end) on the calling thread's
  /// context (data::RowBatch::gather_ahead, with `caller_waits`), for part() to take. Nothing
  /// for tensors, nor where no thread would wait (one thread, and it does not wait for peers).
  void gather_ahead(int slot, std::int64_t begin, std::int64_t end, bool caller_waits) const;
  /// Tensors, or rows in host memory (as stored), for a calling thread that computes on a GPU
  /// (the caller decides): reserves device
  /// memory there for slot's rows [begin, end) and marks the device's work so far
  /// (DeviceUpload), and has the input worker start gathering the rows where it gathers them.
  /// Before the step that the copy is to run beside is queued. `spent`: a batch whose upload in
  /// this slot part() took, whose host memory (the upload's state and vectors) this one's is
  /// made in, so that a step's upload ahead allocates none of its own (the batch before it).
  void reserve_upload(int slot, std::int64_t begin, std::int64_t end, const GlobalBatch* spent = nullptr) const;
  /// After that step is queued: starts the copy (of the rows the worker gathered, waiting for
  /// them, or gathered here), for part() to take.
  void start_upload(int slot) const;
  /// Whether slot has a started upload for part() to take.
  bool uploaded(int slot) const;

 private:
  // A batch of rows read on a thread that computes on a GPU: its rows are copied as stored and
  // cast there (cast_on_device).
  bool stored_to_device() const;
  data::Element cast_on_device(data::Element stored) const;

  data::Element tensors_;
  std::optional<data::RowBatch> rows_;
  bool gather_on_worker_ = false;
  bool gather_into_staging_ = true;
  // A slot's upload ahead: rows [begin, end) while `reserved`; `host`: the rows being gathered on
  // the input worker. Once part() took it, its shapes, dtypes and copy keep their memory for
  // the batch ahead (reserve_upload's `spent`).
  struct Upload {
    std::int64_t begin = 0, end = 0;
    bool reserved = false;
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    DeviceUpload copy;
    std::future<data::Element> host = {};
    Upload() = default;
    Upload(Upload&&) = default;
    ~Upload() { wait_host(); }
    void wait_host() {
      if (host.valid()) host.wait();  // the worker may be writing into copy's staging blocks
    }
    // Not reserved: what it reserved goes back (a copy started is waited for by later work).
    void drop();
  };
  // A slot's gather or upload ahead (a replica's).
  struct Slot {
    std::optional<data::PendingRows> ahead;
    Upload upload;
  };
  // The upload's staging blocks that slot's rows are gathered into, by component (undefined:
  // gathered into host memory of its own).
  data::Element staged(Upload& up) const;
  mutable std::vector<Slot> slots_;
};

/// Each of this worker's replicas' slice of one step, in replica order. A split global batch's
/// slices are cut where they are used (on the replicas' threads, by strategy.run), or here where
/// they are read: the first read gathers that slice on the calling thread.
class ReplicaSlices {
 public:
  void push_back(data::Element slice) { cut_.emplace_back(std::move(slice)); }
  std::size_t size() const { return cut_.size(); }
  const data::Element& operator[](std::size_t local) const;

 private:
  friend struct DistributedBatch;
  mutable std::vector<std::optional<data::Element>> cut_;
  std::shared_ptr<const GlobalBatch> global_;
  int num_replicas_ = 1;
  int first_replica_ = 0;
};

/// One step's input from a distributed dataset: each of this worker's replicas' slice (replica
/// order), each slice's first row index in the global batch, and the global batch's size.
struct DistributedBatch {
  ReplicaSlices slices;
  std::vector<std::int64_t> offsets;
  std::int64_t global_size = 0;
  /// A split global batch: the batch, replica r's slice being its rows
  /// data::replica_rows(global_size, num_replicas, r), and the batch after it where the
  /// iterator knew it, whose slices the replicas prepare while this step runs.
  std::shared_ptr<const GlobalBatch> global;
  std::shared_ptr<const GlobalBatch> ahead;
  int num_replicas = 1;
  int first_replica = 0;  // this worker's first replica in the sync group

  /// `global` split over num_replicas replicas, of which this worker keeps `local_replicas`
  /// from first_replica.
  static DistributedBatch split(std::shared_ptr<const GlobalBatch> global, int num_replicas, int first_replica = 0,
                                int local_replicas = -1, std::shared_ptr<const GlobalBatch> ahead = nullptr);
  /// This worker's replicas' slices.
  std::size_t num_slices() const { return slices.size(); }
  /// On the calling thread, before the replicas run: room for their preparations ahead.
  void make_ahead_slots() const;
  /// Local replica `local`'s slice on the calling thread's device (a replica's thread); with
  /// `ahead`, the replica then starts preparing its slice of that batch (gathering, or
  /// reserving device memory for the copy).
  data::Element begin_slice(int local) const;
  /// After the replica's step is queued: starts its copy of the batch ahead (GPU).
  void end_slice(int local) const;
};

/// `element` with every tensor on the device of this thread's compute context (a replica's
/// GPU): host slices are copied there; tensors already of that kind are kept (no copy).
data::Element to_current_device(const data::Element& element);

}  // namespace lockstep::distribute
