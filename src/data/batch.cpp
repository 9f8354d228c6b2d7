// batch: stacks consecutive elements. Over a row-selection chain (from_tensor_slices, shuffle,
// repeat, take) it gathers rows of the source tensors straight into the batch (gather_rows:
// one copy per run of consecutive rows), with no per-row tensor, or hands the rows over
// ungathered (RowBatch); otherwise it stacks the elements it gets.
#include <algorithm>

#include "data/nodes.hpp"
#include "data/worker.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/ops.hpp"
#include "tensor/gather_range.hpp"

namespace lockstep::data::detail {

namespace {

// Never reserve more than this many rows ahead: batch_size may be absurdly large.
constexpr std::int64_t kMaxReserve = 1 << 16;

// The batches of a row-selection chain as row indices (RowBatch); gathering them is the
// consumer's (GatherBatchIterator below, or fit's replicas).
class RowBatchMaker final : public RowBatchIterator {
 public:
  RowBatchMaker(NodePtr input, std::int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)),
        indices_(input_->make_index_iterator()),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}

  std::optional<RowBatch> next() override {
    RowBatch b{.owner = input_, .sources = input_->row_source(), .rows = {}};
    b.rows.reserve(static_cast<std::size_t>(std::min(batch_size_, kMaxReserve)));
    while (indices_ && b.size() < batch_size_) {
      if (auto i = indices_->next()) {
        b.rows.push_back(*i);
      } else {
        indices_.reset();
      }
    }
    if (b.size() == 0 || (drop_remainder_ && b.size() < batch_size_)) return std::nullopt;
    return b;
  }

 private:
  NodePtr input_;  // owns the sources
  std::unique_ptr<IndexIterator> indices_;  // null once exhausted
  std::int64_t batch_size_;
  bool drop_remainder_;
};

class GatherBatchIterator final : public Iterator {
 public:
  explicit GatherBatchIterator(std::unique_ptr<RowBatchIterator> batches) : batches_(std::move(batches)) {}

  std::optional<Element> next() override {
    auto b = batches_->next();
    if (!b) return std::nullopt;
    return b->gather();
  }

 private:
  std::unique_ptr<RowBatchIterator> batches_;
};

class StackBatchIterator final : public Iterator {
 public:
  StackBatchIterator(std::unique_ptr<Iterator> input, std::int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {
    elements_.reserve(static_cast<std::size_t>(std::min(batch_size_, kMaxReserve)));
  }

  std::optional<Element> next() override {
    elements_.clear();
    while (input_ && static_cast<std::int64_t>(elements_.size()) < batch_size_) {
      auto e = input_->next();
      if (!e) {
        input_.reset();
        break;
      }
      if (!elements_.empty()) check_matches(*e, elements_.front());
      elements_.push_back(std::move(*e));
      ++consumed_;
    }
    const auto k = static_cast<std::int64_t>(elements_.size());
    if (k == 0 || (drop_remainder_ && k < batch_size_)) return std::nullopt;
    const Element& first = elements_.front();
    Element batch;
    batch.reserve(first.size());
    std::vector<Tensor> column(static_cast<std::size_t>(k));
    for (std::size_t c = 0; c < first.size(); ++c) {
      for (std::int64_t r = 0; r < k; ++r) column[static_cast<std::size_t>(r)] = elements_[static_cast<std::size_t>(r)][c];
      batch.push_back(stack(column));
    }
    return batch;
  }

 private:
  void check_matches(const Element& e, const Element& first) const {
    LOCKSTEP_CHECK(e.size() == first.size(), "Dataset::batch: element ", consumed_, " has ", e.size(),
                   " components but element ", consumed_ - elements_.size(), " (first of its batch) has ",
                   first.size());
    for (std::size_t c = 0; c < e.size(); ++c) {
      LOCKSTEP_CHECK(e[c].dtype() == first[c].dtype() && e[c].shape() == first[c].shape(), "Dataset::batch: element ",
                     consumed_, " component ", c, " is ", dtype_name(e[c].dtype()), " ", e[c].shape().str(),
                     " but element ", consumed_ - elements_.size(), " (first of its batch) is ",
                     dtype_name(first[c].dtype()), " ", first[c].shape().str(),
                     "; elements of one batch must have equal dtypes and shapes");
    }
  }

  std::unique_ptr<Iterator> input_;  // null once exhausted
  std::int64_t batch_size_;
  bool drop_remainder_;
  std::vector<Element> elements_;
  std::int64_t consumed_ = 0;  // input elements so far: the index errors name
};

class BatchNode final : public DatasetNode {
 public:
  BatchNode(NodePtr input, std::int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  std::unique_ptr<Iterator> make_iterator() const override {
    if (auto rows = make_row_batch_iterator()) return std::make_unique<GatherBatchIterator>(std::move(rows));
    return std::make_unique<StackBatchIterator>(input_->make_iterator(), batch_size_, drop_remainder_);
  }
  bool row_batches() const override { return input_->row_source() != nullptr; }
  std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const override {
    if (!row_batches()) return nullptr;
    return std::make_unique<RowBatchMaker>(input_, batch_size_, drop_remainder_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }
  std::string name() const override {
    return "batch(batch_size=" + std::to_string(batch_size_) + (drop_remainder_ ? ", drop_remainder=true)" : ")");
  }

 private:
  NodePtr input_;
  std::int64_t batch_size_;
  bool drop_remainder_;
};

}  // namespace

NodePtr make_batch_node(NodePtr input, std::int64_t batch_size, bool drop_remainder) {
  LOCKSTEP_CHECK(batch_size >= 1, "Dataset::batch: batch_size must be >= 1, got ", batch_size);
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}

}  // namespace lockstep::data::detail

namespace lockstep::data {

namespace {
Tensor index_of(const RowBatch& b, const char* op, std::int64_t begin, std::int64_t end) {
  LOCKSTEP_CHECK(b.sources != nullptr, op, ": the batch has no sources");
  LOCKSTEP_CHECK(begin >= 0 && begin <= end && end <= b.size(), op, ": rows [", begin, ", ", end,
                 ") are outside the batch of ", b.size());
  Tensor index = Tensor::empty({end - begin}, DType::kI64);
  index.copy_from_host(b.rows.data() + begin, static_cast<std::size_t>(end - begin) * sizeof(std::int64_t));
  return index;
}

// A chunk of a gather ahead: about this many bytes, a few microseconds of copying, so that a
// worker in one delays the pool's next job by no more than that.
constexpr std::int64_t kAheadChunkBytes = 32 << 10;
}  // namespace

DType RowSource::dtype(std::size_t c) const { return scale(c) ? DType::kF32 : tensors.at(c).dtype(); }

Tensor RowSource::gather(std::size_t c, const Tensor& index) const {
  if (!scale(c)) return gather_rows(tensors.at(c), index);
  std::vector<std::int64_t> dims = tensors.at(c).shape().dims();
  dims[0] = index.numel();
  Tensor out = Tensor::empty(Shape(std::move(dims)), DType::kF32);
  gather_into(c, out, index);
  return out;
}

void RowSource::gather_into(std::size_t c, Tensor& dst, const Tensor& index) const {
  if (const auto s = scale(c)) return gather_rows_scaled_into(dst, tensors.at(c), index, *s);
  gather_rows_into(dst, tensors.at(c), index);
}

Element RowBatch::gather(std::int64_t begin, std::int64_t end) const {
  const Tensor index = index_of(*this, "RowBatch::gather", begin, end);
  Element out;
  out.reserve(sources->size());
  for (std::size_t c = 0; c < sources->size(); ++c) out.push_back(sources->gather(c, index));
  return out;
}

Element RowBatch::gather_stored(std::int64_t begin, std::int64_t end) const {
  Element out;
  gather_stored_into(begin, end, out);
  return out;
}

void RowBatch::gather_stored_into(std::int64_t begin, std::int64_t end, Element& out) const {
  // The pipeline's one-thread context: host memory, and the rows copied on this thread (a
  // replica's thread that would otherwise wait for its device), not by a pool of cores.
  ComputeScope on_host(detail::input_context());
  const Tensor index = index_of(*this, "RowBatch::gather_stored", begin, end);
  out.resize(sources->size());
  for (std::size_t c = 0; c < sources->size(); ++c) {
    if (out[c].defined()) gather_rows_into(out[c], sources->tensors[c], index);
    else out[c] = gather_rows(sources->tensors[c], index);
  }
}

std::future<Element> detail::gather_stored_ahead(const RowBatch& batch, std::int64_t begin, std::int64_t end,
                                                  Element into, int worker_index) {
  auto done = std::make_shared<std::promise<Element>>();
  std::future<Element> out = done->get_future();
  // The job holds a copy of the batch (its node keeps the sources alive) and of nothing else:
  // the caller may drop the future before the rows are gathered. A range outside the batch is
  // gather_stored's error, at get().
  run_on_input_worker(worker_index, [rows = batch, begin, end, done, into = std::move(into)]() mutable {
    try {
      rows.gather_stored_into(begin, end, into);
      done->set_value(std::move(into));
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  return out;
}

struct PendingRows::State {
  RowBatch batch;  // its node keeps the sources alive
  std::int64_t begin = 0, end = 0;
  // Offered to the context's pool: the slice's tensors, and the chunks that fill them.
  Element out;
  std::unique_ptr<IdleWork> work;
  // Components that the source casts (RowSource::scale) are gathered ahead as stored and cast by
  // take() (see gather_ahead).
  bool cast_at_take = false;
  bool taken = false;
};

PendingRows::PendingRows(std::unique_ptr<State> state) : s_(std::move(state)) {}
PendingRows::PendingRows(PendingRows&&) noexcept = default;
PendingRows& PendingRows::operator=(PendingRows&& other) noexcept {
  if (this != &other) {
    PendingRows dropped(std::move(*this));
    s_ = std::move(other.s_);
  }
  return *this;
}
PendingRows::~PendingRows() = default;  // an untaken work is withdrawn by its destructor
std::int64_t PendingRows::begin() const { return s_->begin; }
std::int64_t PendingRows::end() const { return s_->end; }

Element PendingRows::take() {
  LOCKSTEP_CHECK(s_ && !s_->taken, "PendingRows::take: the rows were taken already");
  s_->taken = true;
  if (!s_->work) return s_->batch.gather(s_->begin, s_->end);
  s_->work->finish();
  if (s_->cast_at_take) {
    for (std::size_t c = 0; c < s_->out.size(); ++c)
      if (const auto scale = s_->batch.sources->scale(c)) s_->out[c] = cast_and_scale(s_->out[c], *scale);
  }
  return std::move(s_->out);
}

PendingRows RowBatch::gather_ahead(std::int64_t begin, std::int64_t end, bool caller_waits) const {
  LOCKSTEP_CHECK(sources != nullptr && begin >= 0 && begin <= end && end <= size(), "RowBatch::gather_ahead: rows [",
                 begin, ", ", end, ") are outside the batch of ", size());
  auto s = std::make_unique<PendingRows::State>();
  s->batch = *this;
  s->begin = begin;
  s->end = end;
  ComputeContext& ctx = current_compute_context();
  if (context_device(ctx).kind != DeviceKind::kCpu || (context_threads(ctx) < 2 && !caller_waits) || begin == end)
    return PendingRows(std::move(s));  // no idle threads to give it to: take() gathers
  const Tensor index = index_of(*this, "RowBatch::gather_ahead", begin, end);
  // A component that the source casts (uint8 pixels to float32) is cast as its rows are gathered
  // where pool workers gather them, while the caller computes: the floats are ready at take().
  // A caller with no workers gathers while it waits for its peers (a replica on one core), well
  // before its next step reads the slice, and that step's other traffic (the optimizer's
  // update) would push the floats out of cache first: it gathers the bytes instead, a quarter of
  // the memory, and take() casts them, reading them in order and writing the floats just before
  // the first layer reads them (bench/fit_overhead, flagship, 2 replicas on 2 cores: 1.04x the
  // steps/s of float32 pixels; casting at take on a pool of 2 threads: 0.88x, its cast being
  // serial work on the step's path).
  s->cast_at_take = context_threads(ctx) < 2;
  // Chunks: (component, first row, end row), in component order.
  struct Chunk {
    std::size_t component;
    std::int64_t r0, r1;
  };
  const auto dtype_of = [&](std::size_t c) {
    return s->cast_at_take ? sources->tensors[c].dtype() : sources->dtype(c);
  };
  const auto rows_per_chunk = [&](std::size_t c) {
    // Bytes written: what a chunk's copying time follows.
    const Tensor& src = sources->tensors[c];
    const std::int64_t row = src.dim(0) ? src.numel() / src.dim(0) : 0;
    const std::int64_t row_bytes = std::max<std::int64_t>(1, row * static_cast<std::int64_t>(dtype_size(dtype_of(c))));
    return std::max<std::int64_t>(1, kAheadChunkBytes / row_bytes);
  };
  std::size_t count = 0;
  for (std::size_t c = 0; c < sources->size(); ++c)
    count += static_cast<std::size_t>((end - begin + rows_per_chunk(c) - 1) / rows_per_chunk(c));
  std::vector<Chunk> chunks;
  chunks.reserve(count);
  s->out.reserve(sources->size());
  for (std::size_t c = 0; c < sources->size(); ++c) {
    std::vector<std::int64_t> dims = sources->tensors[c].shape().dims();
    dims[0] = end - begin;
    s->out.push_back(Tensor::empty(Shape(std::move(dims)), dtype_of(c)));
    const std::int64_t per_chunk = rows_per_chunk(c);
    for (std::int64_t r = 0; r < end - begin; r += per_chunk)
      chunks.push_back({c, r, std::min(end - begin, r + per_chunk)});
  }
  const auto n = static_cast<std::int64_t>(chunks.size());
  const RowSource* srcs = sources;
  Element* out = &s->out;
  const bool as_stored = s->cast_at_take;
  // Each chunk writes its rows of the slice's tensors in place (no slice of them or of the index
  // made per chunk); a tensor's chunks write disjoint rows.
  s->work = std::make_unique<IdleWork>(ctx, n, [srcs, out, index, as_stored, chunks = std::move(chunks)](std::int64_t i) {
    const Chunk& ch = chunks[static_cast<std::size_t>(i)];
    const std::optional<float> scale = as_stored ? std::nullopt : srcs->scale(ch.component);
    lockstep::detail::gather_rows_range_into((*out)[ch.component], srcs->tensors[ch.component], index, ch.r0, ch.r1,
                                             scale);
  });
  if (!s->work->offered()) {  // another gather is out: take() gathers
    s->work.reset();
    s->out.clear();
  }
  return PendingRows(std::move(s));
}

}  // namespace lockstep::data
