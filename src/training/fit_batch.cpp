#include "training/fit_batch.hpp"

#include <vector>

#include "lockstep/tensor/compute_context.hpp"

namespace lockstep::detail {

std::int64_t FitBatch::size() const {
  if (rows_) return rows_->size();
  return !tensors_.empty() && tensors_[0].rank() >= 1 ? tensors_[0].dim(0) : 0;
}

Shape FitBatch::shape(std::size_t c) const {
  if (!rows_) return tensors_.at(c).shape();
  std::vector<std::int64_t> dims{rows_->size()};
  const Shape row = rows_->sources->tensors.at(c).shape().tail();
  for (auto d : row.dims()) dims.push_back(d);
  return Shape(std::move(dims));
}

namespace {
// Slot `slot` of per-slot state, or null where there is none (no slots made, or out of range).
template <typename T>
std::optional<T>* slot_of(const std::shared_ptr<std::vector<std::optional<T>>>& slots, int slot) {
  if (!slots || slot < 0 || static_cast<std::size_t>(slot) >= slots->size()) return nullptr;
  return &(*slots)[static_cast<std::size_t>(slot)];
}
}  // namespace

bool FitBatch::uploaded(int slot) const {
  const auto* up = slot_of(uploads_, slot);
  return up && *up && (*up)->copy.started();
}

data::Element FitBatch::part(std::int64_t begin, std::int64_t end, int slot) const {
  if (auto* up = slot_of(uploads_, slot)) {
    if (*up && (*up)->begin == begin && (*up)->end == end && (*up)->copy.started()) {
      data::Element out = (*up)->copy.take();
      up->reset();
      return out;
    }
    up->reset();  // another range, or never started: its memory goes back
  }
  if (auto* slot_ahead = rows_ ? slot_of(ahead_, slot) : nullptr) {
    std::optional<data::PendingRows>& pending = *slot_ahead;
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

void FitBatch::make_slots(int slots) const {
  const auto n = static_cast<std::size_t>(slots);
  if (rows_) {
    if (!ahead_) ahead_ = std::make_shared<std::vector<std::optional<data::PendingRows>>>();
    if (ahead_->size() < n) ahead_->resize(n);
  } else {
    if (!uploads_) uploads_ = std::make_shared<std::vector<std::optional<Upload>>>();
    if (uploads_->size() < n) uploads_->resize(n);
  }
}

void FitBatch::reserve_upload(int slot, std::int64_t begin, std::int64_t end) const {
  auto* up = rows_ ? nullptr : slot_of(uploads_, slot);
  if (!up) return;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : tensors_) {
    if (t.rank() < 1 || t.device().kind != DeviceKind::kCpu) return;  // a scalar, or not from the host
    std::vector<std::int64_t> dims = t.shape().dims();
    dims[0] = end - begin;
    shapes.emplace_back(std::move(dims));
    dtypes.push_back(t.dtype());
  }
  up->emplace(Upload{begin, end, DeviceUpload(shapes, dtypes)});
}

void FitBatch::start_upload(int slot) const {
  auto* up = slot_of(uploads_, slot);
  if (!up || !*up) return;
  data::Element host;
  for (const Tensor& t : tensors_) host.push_back(t.slice((*up)->begin, (*up)->end));
  (*up)->copy.start(host);
}

void FitBatch::gather_ahead(int slot, std::int64_t begin, std::int64_t end, bool caller_waits) const {
  auto* pending = rows_ ? slot_of(ahead_, slot) : nullptr;
  if (!pending) return;
  // A pool of one thread that waits for nobody has no time to give it: part() gathers, as
  // without it (and no state is built per step for nothing).
  if (context_threads(current_compute_context()) < 2 && !caller_waits) return;
  if (!*pending) pending->emplace(rows_->gather_ahead(begin, end, caller_waits));
}

FitInput::FitInput(const data::Dataset& dataset, bool row_batches, bool peek_elements)
    : peek_elements_(peek_elements) {
  if (row_batches) rows_ = dataset.make_row_batch_iterator();
  if (!rows_) elements_ = dataset.make_iterator();
}

const FitBatch* FitInput::peek() {
  if (ahead_) return &*ahead_;
  if (rows_) {
    auto b = rows_->next();
    if (!b) return nullptr;
    ahead_.emplace(std::move(*b));
  } else if (peek_elements_ && !ended_) {
    auto e = elements_->next();
    if (!e) {
      ended_ = true;  // next() says so without asking the iterator again
      return nullptr;
    }
    ahead_.emplace(std::move(*e));
  } else {
    return nullptr;
  }
  return &*ahead_;
}

std::optional<FitBatch> FitInput::next() {
  if (ahead_) {
    std::optional<FitBatch> b = std::move(ahead_);
    ahead_.reset();
    return b;
  }
  if (rows_) {
    auto b = rows_->next();
    if (!b) return std::nullopt;
    return FitBatch(std::move(*b));
  }
  if (ended_) return std::nullopt;
  auto e = elements_->next();
  if (!e) return std::nullopt;
  return FitBatch(std::move(*e));
}

void FitInput::skip(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const bool got = next().has_value();
    if (!got) return;
  }
}

}  // namespace lockstep::detail
