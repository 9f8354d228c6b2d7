// Distributed datasets (experimental_distribute_dataset, distribute_datasets_from_function):
// the one input path of fit and custom loops. See distributed_batch.hpp.
#include <cstdio>
#include <utility>
#include <vector>

#include "backend/context.hpp"
#include "data/worker.hpp"
#include "lockstep/data/thread_budget.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/ops.hpp"
#include "tensor/host_copy.hpp"

namespace lockstep::distribute {

std::int64_t GlobalBatch::size() const {
  if (rows_) return rows_->size();
  return !tensors_.empty() && tensors_[0].rank() >= 1 ? tensors_[0].dim(0) : 0;
}

Shape GlobalBatch::shape(std::size_t c) const {
  if (!rows_) return tensors_.at(c).shape();
  std::vector<std::int64_t> dims{rows_->size()};
  const Shape row = rows_->sources->tensors.at(c).shape().tail();
  for (auto d : row.dims()) dims.push_back(d);
  return Shape(std::move(dims));
}

namespace {
// Slot `slot` of per-slot state, or null where there is none (no slots made, or out of range).
template <typename T>
T* slot_of(std::vector<T>& slots, int slot) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= slots.size()) return nullptr;
  return &slots[static_cast<std::size_t>(slot)];
}

// The smallest slice the input worker gathers for an upload ahead: handing a gather to it costs
// the replica's thread about 8 us (its wake-up, the job), more than copying a smaller slice
// itself (bench/fit_host_cost on emulated gpu:0: MNIST at batch 64, 50 KB, went from 12 to 20
// us of CPU added per step; batch 1024, 800 KB, about 100 us of copying).
constexpr std::int64_t kWorkerGatherBytes = 256 << 10;

// A batch's tensors on this thread's device; integer ones keep their host bytes there, so that
// labels are checked on the host (the input path's own copies: nothing writes to them after).
// The batch's own vector is reused (to_current_device's rule, in place).
data::Element batch_to_device(data::Element batch) {
  const Device here = backend::current_context().device();
  for (Tensor& t : batch) {
    const Tensor host = t;
    if (t.defined() && t.device().kind != here.kind) t = host.to(here);
    detail::remember_host_copy(t, host);
  }
  return batch;
}
}  // namespace

bool GlobalBatch::stored_to_device() const {
  return rows_ && context_device(current_compute_context()).kind != DeviceKind::kCpu;
}

data::Element GlobalBatch::cast_on_device(data::Element stored) const {
  // The cast that gathering on the host does (RowSource::scale), by the same rule.
  for (std::size_t c = 0; c < stored.size(); ++c)
    if (const auto s = rows_->sources->scale(c)) stored[c] = cast_and_scale(stored[c], *s);
  return stored;
}

void GlobalBatch::Upload::drop() {
  wait_host();
  host = {};
  copy = DeviceUpload();
  reserved = false;
}

bool GlobalBatch::uploaded(int slot) const {
  const Slot* s = slot_of(slots_, slot);
  return s && s->upload.reserved && s->upload.copy.started();
}

data::Element GlobalBatch::part(std::int64_t begin, std::int64_t end, int slot) const {
  if (Slot* s = slot_of(slots_, slot)) {
    Upload& up = s->upload;
    if (up.reserved && up.begin == begin && up.end == end && up.copy.started()) {
      data::Element out = up.copy.take();
      up.reserved = false;  // spent: its memory kept for the batch ahead's upload
      return rows_ ? cast_on_device(std::move(out)) : out;
    }
    if (up.reserved) up.drop();  // another range, or never started: its memory goes back
  }
  if (stored_to_device()) return cast_on_device(batch_to_device(rows_->gather_stored(begin, end)));
  if (Slot* s = rows_ ? slot_of(slots_, slot) : nullptr) {
    std::optional<data::PendingRows>& pending = s->ahead;
    if (pending && pending->begin() == begin && pending->end() == end) {
      data::Element out = pending->take();
      pending.reset();
      return out;
    }
  }
  if (rows_) return rows_->gather(begin, end);
  data::Element out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.slice(begin, end));
  return out;
}

void GlobalBatch::make_slots(int slots) const {
  const auto n = static_cast<std::size_t>(slots);
  if (slots_.size() < n) slots_.resize(n);
}

void GlobalBatch::reserve_upload(int slot, std::int64_t begin, std::int64_t end, const GlobalBatch* spent) const {
  Slot* s = slot_of(slots_, slot);
  if (!s) return;
  const std::vector<Tensor>& stored = rows_ ? rows_->sources->tensors : tensors_;
  for (const Tensor& t : stored)
    if (t.rank() < 1 || t.device().kind != DeviceKind::kCpu) return;  // a scalar, or not from the host
  Upload& up = s->upload;
  if (up.reserved) up.drop();
  // The spent upload's memory: its vectors and state, this slot's (a replica's thread's) alone.
  Slot* from = spent && spent != this ? slot_of(spent->slots_, slot) : nullptr;
  if (from && !from->upload.reserved && !from->upload.host.valid()) {
    std::swap(up.shapes, from->upload.shapes);
    std::swap(up.dtypes, from->upload.dtypes);
    std::swap(up.copy, from->upload.copy);
  }
  // Rows travel as their sources store them (part() casts them on the device). The shapes are
  // written into the vectors kept (no allocation where they are as large).
  up.shapes.resize(stored.size());
  up.dtypes.resize(stored.size());
  std::int64_t bytes = 0;
  for (std::size_t c = 0; c < stored.size(); ++c) {
    const std::vector<std::int64_t>& dims = stored[c].shape().dims();
    up.shapes[c].dims().assign(dims.begin(), dims.end());
    up.shapes[c].dims()[0] = end - begin;
    up.dtypes[c] = stored[c].dtype();
    bytes += up.shapes[c].numel() * static_cast<std::int64_t>(dtype_size(up.dtypes[c]));
  }
  up.copy.reserve(up.shapes, up.dtypes);
  up.begin = begin;
  up.end = end;
  up.reserved = true;
  if (rows_ && gather_on_worker_ && bytes >= kWorkerGatherBytes)
    up.host = data::detail::gather_stored_ahead(*rows_, begin, end, staged(up), slot);
}

data::Element GlobalBatch::staged(Upload& up) const {
  data::Element into(rows_->sources->size());
  // An integer component as stored may be labels, which are checked on the host from the host
  // copy the upload keeps (remember_host_copy): gathered into memory of its own, not a block
  // lent again after the copy.
  for (std::size_t c = 0; gather_into_staging_ && c < into.size(); ++c)
    if (rows_->sources->scale(c) || is_floating(rows_->sources->tensors[c].dtype())) into[c] = up.copy.stage(c);
  return into;
}

void GlobalBatch::start_upload(int slot) const {
  Slot* s = slot_of(slots_, slot);
  if (!s || !s->upload.reserved) return;
  Upload& up = s->upload;
  data::Element host;
  if (rows_ && up.host.valid()) {
    host = up.host.get();
  } else if (rows_) {
    host = staged(up);
    rows_->gather_stored_into(up.begin, up.end, host);
  }
  for (const Tensor& t : tensors_) host.push_back(t.slice(up.begin, up.end));
  up.copy.start(host);
}

void GlobalBatch::gather_ahead(int slot, std::int64_t begin, std::int64_t end, bool caller_waits) const {
  Slot* s = rows_ ? slot_of(slots_, slot) : nullptr;
  if (!s) return;
  // A pool of one thread that waits for nobody has no time to give it: part() gathers, as
  // without it (and no state is built per step for nothing).
  if (context_threads(current_compute_context()) < 2 && !caller_waits) return;
  if (!s->ahead) s->ahead.emplace(rows_->gather_ahead(begin, end, caller_waits));
}

const data::Element& ReplicaSlices::operator[](std::size_t local) const {
  LOCKSTEP_CHECK(local < cut_.size(), "DistributedBatch: replica ", local, " out of range (", cut_.size(),
                 " replicas)");
  std::optional<data::Element>& slice = cut_[local];
  if (!slice) {
    const int r = first_replica_ + static_cast<int>(local);
    const auto [begin, end] = data::replica_rows(global_->size(), num_replicas_, r);
    slice = global_->part(begin, end, /*slot=*/-1);  // leaves the replica's gathers ahead alone
  }
  return *slice;
}

DistributedBatch DistributedBatch::split(std::shared_ptr<const GlobalBatch> global, int num_replicas,
                                         int first_replica, int local_replicas,
                                         std::shared_ptr<const GlobalBatch> ahead) {
  DistributedBatch b;
  b.global_size = global->size();
  b.num_replicas = num_replicas;
  b.first_replica = first_replica;
  const int local = local_replicas < 0 ? num_replicas : local_replicas;
  for (int r = first_replica; r < first_replica + local; ++r)
    b.offsets.push_back(data::replica_rows(b.global_size, num_replicas, r).first);
  b.slices.cut_.resize(static_cast<std::size_t>(local));
  b.slices.global_ = global;
  b.slices.num_replicas_ = num_replicas;
  b.slices.first_replica_ = first_replica;
  b.global = std::move(global);
  b.ahead = std::move(ahead);
  return b;
}

void DistributedBatch::make_ahead_slots() const {
  if (ahead) ahead->make_slots(num_replicas);
}

data::Element DistributedBatch::begin_slice(int local) const {
  if (!global) return batch_to_device(slices[static_cast<std::size_t>(local)]);
  const int r = first_replica + local;
  const auto [begin, end] = data::replica_rows(global_size, num_replicas, r);
  // One replica of tensors takes them whole (no views), unless their copy ahead is on its device.
  data::Element slice = num_replicas == 1 && global->tensors() && !global->uploaded(r) ? *global->tensors()
                                                                                      : global->part(begin, end, r);
  if (ahead) {
    const auto [next_begin, next_end] = data::replica_rows(ahead->size(), num_replicas, r);
    // With peers, a replica waits for them (at the gradient exchange, for the next step) and
    // gathers while it waits, even on one thread.
    if (context_device(current_compute_context()).kind != DeviceKind::kCpu)
      ahead->reserve_upload(r, next_begin, next_end, global.get());
    else
      ahead->gather_ahead(r, next_begin, next_end, num_replicas > 1);
  }
  return batch_to_device(std::move(slice));
}

void DistributedBatch::end_slice(int local) const {
  if (ahead && context_device(current_compute_context()).kind != DeviceKind::kCpu)
    ahead->start_upload(first_replica + local);
}

data::Element to_current_device(const data::Element& element) {
  const Device here = backend::current_context().device();
  data::Element out = element;
  for (auto& t : out)
    if (t.defined() && t.device().kind != here.kind) t = t.to(here);
  return out;
}

std::unique_ptr<Strategy::DistributedIterator> Strategy::DistributedDataset::make_iterator() const {
  return std::make_unique<DistributedIterator>(dataset_, options_);
}

Strategy::DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& dataset) const {
  DistributedInputOptions o{.replicas = num_replicas_in_sync(),
                            .first_replica = worker_index_ * num_local_replicas(),
                            .local_replicas = num_local_replicas()};
  // As fit reads (FitLoop): where the replicas keep every core busy they gather their own
  // slices; replicas on GPUs gather theirs as stored and copy the next one ahead.
  int threads = 0;
  for (const auto* ctx : context_ptrs_) {
    threads += context_threads(*ctx);
    o.peek_elements |= context_device(*ctx).kind != DeviceKind::kCpu;
  }
  o.row_batches = o.peek_elements || threads >= data::ThreadBudget::process().cores();
  return DistributedDataset(dataset, o);
}

Strategy::DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const data::InputContext&)>& fn) const {
  // One input pipeline per worker, feeding that worker's replicas.
  data::InputContext ctx{.num_input_pipelines = num_workers_,
                         .input_pipeline_id = worker_index_,
                         .num_replicas_in_sync = num_replicas_in_sync()};
  ctx.validate();
  return DistributedDataset(fn(ctx), num_local_replicas(), /*per_replica_batches=*/true);
}

Strategy::DistributedIterator::DistributedIterator(const data::Dataset& dataset, const DistributedInputOptions& o)
    : o_(o) {
  if (o_.local_replicas < 0) o_.local_replicas = o_.replicas;
  if (o_.row_batches && !o_.per_replica_batches) rows_ = dataset.make_row_batch_iterator();
  if (!rows_) it_ = dataset.make_iterator();
}

std::optional<Strategy::DistributedIterator::Batch> Strategy::DistributedIterator::next_per_replica() {
  Batch b;
  for (int r = 0; r < o_.replicas; ++r) {
    auto e = it_->next();
    if (!e) {
      // A partial step would leave replicas without input: drop it, as a short final round.
      if (r == 0) return std::nullopt;
      std::fprintf(stderr, "WARNING: distribute_datasets_from_function: the input ended after %d of %d replicas' "
                   "batches; the incomplete step is dropped\n", r, o_.replicas);
      return std::nullopt;
    }
    LOCKSTEP_CHECK(!e->empty() && (*e)[0].rank() >= 1, "distribute_datasets_from_function: elements must be batches");
    b.offsets.push_back(b.global_size);
    b.global_size += (*e)[0].dim(0);
    b.slices.push_back(std::move(*e));
  }
  return b;
}

std::shared_ptr<const GlobalBatch> Strategy::DistributedIterator::read(bool ahead) {
  if (rows_) {
    auto b = rows_->next();
    return b ? std::make_shared<const GlobalBatch>(std::move(*b), o_.gather_on_worker, o_.gather_into_staging) : nullptr;
  }
  // Elements are read ahead only to copy them to GPUs (where the replicas' threads only queue
  // work): elsewhere reading one ahead would wait for the pipeline for nothing.
  if (ended_ || (ahead && !o_.peek_elements)) return nullptr;
  auto e = it_->next();
  if (!e) {
    ended_ = true;  // the next read says so without asking the iterator again
    return nullptr;
  }
  if (o_.check_splittable) data::check_splittable(*e, o_.replicas);
  return std::make_shared<const GlobalBatch>(std::move(*e));
}

std::optional<Strategy::DistributedIterator::Batch> Strategy::DistributedIterator::next(bool read_ahead) {
  if (o_.per_replica_batches) return next_per_replica();
  std::shared_ptr<const GlobalBatch> global = ahead_ ? std::move(ahead_) : read(false);
  ahead_.reset();
  if (!global) return std::nullopt;
  if (read_ahead && o_.read_ahead) ahead_ = read(true);
  return DistributedBatch::split(std::move(global), o_.replicas, o_.first_replica, o_.local_replicas, ahead_);
}

void Strategy::DistributedIterator::skip(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!next(false)) return;
}

}  // namespace lockstep::distribute
