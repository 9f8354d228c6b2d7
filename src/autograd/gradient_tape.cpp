#include "lockstep/autograd/gradient_tape.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_rows.hpp"

namespace lockstep {

namespace {
// Pauses every recorder on this thread while gradients are computed.
struct NoRecording {
  OpRecorder* saved = set_current_recorder(nullptr);
  ~NoRecording() { set_current_recorder(saved); }
};

// A tensor's gradient so far, and whether every part of it came already masked by the ReLU
// that produced the tensor (BackwardHints). owned: `sum` is a buffer this walk made (a sum, or
// a gather's gradient), which nothing else holds yet, so a gather's gradient may go into it in
// place; a gradient accumulated as it came (an op's, which may be its output gradient itself) is not.
// partial: a buffer made for row slices' gradients, copied in, holds rows [lo, hi) only so far;
// settled() zeroes the other rows before the whole is read.
struct Accumulated {
  Tensor sum;
  bool masked = true;
  bool owned = false;
  bool partial = false;
  std::int64_t lo = 0, hi = 0;

  Tensor& settled() {
    if (partial) {
      partial = false;
      for (const auto& [b, e] : {std::pair{std::int64_t{0}, lo}, std::pair{hi, sum.dim(0)}}) {
        if (b == e) continue;
        Tensor rows = sum.slice(b, e);
        rows.fill_(0.0);
      }
    }
    return sum;
  }
};

void accumulate(std::unordered_map<std::uint64_t, Accumulated>& grads, const Tensor& input, const Tensor& g,
                bool masked) {
  if (!g.defined()) return;
  auto [it, inserted] = grads.try_emplace(input.id(), Accumulated{g, masked});
  if (inserted) return;
  it->second.sum = add(it->second.settled(), g);
  it->second.masked = it->second.masked && masked;
  it->second.owned = true;
}

// gather_rows' gradient (the output's gradient g added at the rows it was gathered from) and
// slice_rows' (g added at the slice's rows), added into the input's gradient so far in place where
// that is a buffer of the walk's own: a tensor read by many gathers or slices (a recurrent layer's
// steps, each one step's rows) costs the rows read, not a zero-filled copy of the whole tensor and
// a sum of it per read. The sums are those of adding each read's gradient whole, but for the order
// in which a row read more than once adds up. add_rows(dx) adds g into dx.
template <typename AddRows>
void accumulate_rows(std::unordered_map<std::uint64_t, Accumulated>& grads, const Tensor& input, const Tensor& g,
                     AddRows add_rows) {
  auto it = grads.find(input.id());
  if (it != grads.end() && it->second.owned) {
    add_rows(it->second.settled());
    return;
  }
  Tensor dx = Tensor::zeros(input.shape(), g.dtype());
  add_rows(dx);
  if (it == grads.end()) {
    grads.emplace(input.id(), Accumulated{dx, false, true});
    return;
  }
  accumulate(grads, input, dx, false);
}

// slice_rows' gradient g, of input's rows [begin, begin + g.dim(0)). Slices that come each next to
// the rows written so far (a recurrent layer's steps, last to first; LSTM's c then h) are copied
// into one buffer made for them, which no zero fill precedes; any other read adds in place.
void accumulate_slice(std::unordered_map<std::uint64_t, Accumulated>& grads, const Tensor& input,
                      std::int64_t begin, const Tensor& g) {
  const std::int64_t end = begin + g.dim(0);
  const auto copy_rows = [&](Tensor& dx) {
    Tensor rows = dx.slice(begin, end);
    rows.copy_from(g);
  };
  auto it = grads.find(input.id());
  if (it == grads.end()) {
    Accumulated a{Tensor::empty(input.shape(), g.dtype()), false, true, true, begin, end};
    copy_rows(a.sum);
    grads.emplace(input.id(), std::move(a));
    return;
  }
  Accumulated& a = it->second;
  if (a.partial && (end == a.lo || begin == a.hi)) {
    copy_rows(a.sum);
    a.lo = std::min(a.lo, begin);
    a.hi = std::max(a.hi, end);
    return;
  }
  accumulate_rows(grads, input, g, [&](Tensor& dx) { add_rows_into(dx, begin, g); });
}
}  // namespace

GradientTape::GradientTape(bool persistent) : persistent_(persistent), previous_(set_current_recorder(this)) {}

GradientTape::~GradientTape() {
  if (current_recorder() == this) set_current_recorder(previous_);
}

void GradientTape::stop_recording() {
  if (recording_ && current_recorder() == this) set_current_recorder(previous_);
  recording_ = false;
}

void GradientTape::watch(const Tensor& t) {
  LOCKSTEP_CHECK(t.defined(), "GradientTape::watch: undefined tensor");
  watched_.insert(t.id());
}

bool GradientTape::wants(const Tensor* const* inputs, int n) const {
  bool mine = false;
  for (int i = 0; i < n && !mine; ++i) {
    const Tensor& t = *inputs[i];
    mine = t.defined() && (t.impl()->trainable_variable || watched_.count(t.id()));
  }
  return mine || (previous_ && previous_->wants(inputs, n));
}

void GradientTape::record(const OpRecord& r) {
  const std::array<const Tensor*, 3> in{&r.inputs[0], &r.inputs[1], &r.inputs[2]};
  if (previous_ && previous_->wants(in.data(), 3)) previous_->record(r);
  bool mine = false;
  for (const Tensor& t : r.inputs) mine |= t.defined() && (t.impl()->trainable_variable || watched_.count(t.id()));
  if (!mine) return;
  watched_.insert(r.output.id());
  records_.push_back(r);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_gradient) {
  return gradient(target, sources, output_gradient, GradientReady());
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_gradient, const GradientReady& on_ready) {
  return walk({&target, 1}, sources, {&output_gradient, 1}, on_ready);
}

std::vector<Tensor> GradientTape::walk(std::span<const Tensor> targets, const std::vector<Tensor>& sources,
                                       std::span<const Tensor> output_gradients, const GradientReady& on_ready) {
  LOCKSTEP_CHECK(!targets.empty(), "GradientTape::gradient: no target");
  LOCKSTEP_CHECK(output_gradients.size() == targets.size(), "GradientTape::gradient: ", output_gradients.size(),
                 " output gradients for ", targets.size(), " targets");
  for (const Tensor& target : targets)
    LOCKSTEP_CHECK(target.defined(), "GradientTape::gradient: the target is undefined");
  LOCKSTEP_CHECK(persistent_ || !used_,
                 "GradientTape::gradient called twice on a non-persistent tape (make it GradientTape(true))");
  used_ = true;
  NoRecording pause;
  std::unordered_map<std::uint64_t, Accumulated> grads;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const Tensor& target = targets[t];
    const Tensor& output_gradient = output_gradients[t];
    if (output_gradient.defined()) {
      LOCKSTEP_CHECK(output_gradient.shape() == target.shape(), "GradientTape::gradient: output_gradient ",
                     output_gradient.shape().str(), " does not match target ", target.shape().str());
      accumulate(grads, target, output_gradient, false);
    } else {
      // Of the target's dtype, as TF seeds it: a 16-bit loss gets a 16-bit gradient.
      accumulate(grads, target, Tensor::ones(target.shape(), target.dtype()), false);
    }
  }
  auto gradient_of = [&](const Tensor& s) {
    const auto g = grads.find(s.id());
    return g == grads.end() ? Tensor() : g->second.settled();
  };
  // For on_ready: a source's gradient is final once the walk has passed the first record that
  // reads it. final_after[k] lists the sources whose first reader is record k; sources that no
  // record reads are final before the walk starts.
  std::vector<std::vector<std::size_t>> final_after;
  if (on_ready) {
    std::unordered_map<std::uint64_t, std::size_t> first_reader;
    for (const Tensor& s : sources) first_reader.emplace(s.id(), records_.size());
    for (std::size_t k = records_.size(); k-- > 0;)
      for (const Tensor& in : records_[k].inputs)
        if (in.defined())
          if (auto f = first_reader.find(in.id()); f != first_reader.end()) f->second = k;
    final_after.resize(records_.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const std::size_t k = first_reader.at(sources[i].id());
      if (k == records_.size()) on_ready(i, gradient_of(sources[i]));
      else final_after[k].push_back(i);
    }
  }
  // Outputs of ops that mask their gradient by ReLU: a pooling over one may pre-mask.
  std::unordered_set<std::uint64_t> relu_outputs;
  for (const OpRecord& r : records_)
    if (masks_by_relu(r)) relu_outputs.insert(r.output.id());
  for (std::size_t k = records_.size(); k-- > 0;) {
    const OpRecord& rec = records_[k];
    if (auto g = grads.find(rec.output.id()); g != grads.end()) {
      const Tensor gout = g->second.settled();
      std::array<bool, 3> needs;
      for (int i = 0; i < 3; ++i) {
        const Tensor& in = rec.inputs[i];
        needs[i] = in.defined() && (in.impl()->trainable_variable || watched_.count(in.id()));
      }
      BackwardHints hints;
      hints.input_from_relu = rec.inputs[0].defined() && relu_outputs.count(rec.inputs[0].id()) > 0;
      hints.output_gradient_masked = g->second.masked && masks_by_relu(rec);
      const bool masked_input0 = hints.input_from_relu && returns_relu_masked(rec);
      if (rec.type == OpType::kGatherRows) {
        if (needs[0])
          accumulate_rows(grads, rec.inputs[0], gout, [&](Tensor& dx) { scatter_add_rows(dx, rec.saved[0], gout); });
      } else if (rec.type == OpType::kSlice) {
        if (needs[0]) accumulate_slice(grads, rec.inputs[0], rec.i0, gout);
      } else {
        const std::array<Tensor, 3> gin = op_backward(rec, gout, needs, hints);
        for (int i = 0; i < 3; ++i) {
          if (needs[i]) accumulate(grads, rec.inputs[i], gin[i], i == 0 && masked_input0);
        }
      }
    }
    if (on_ready)
      for (std::size_t i : final_after[k]) on_ready(i, gradient_of(sources[i]));
  }
  std::vector<Tensor> out;
  out.reserve(sources.size());
  for (const Tensor& s : sources) out.push_back(gradient_of(s));
  if (!persistent_) records_.clear();
  return out;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable>& sources,
                                           const Tensor& output_gradient) {
  return gradient(target, sources, output_gradient, GradientReady());
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable>& sources,
                                           const Tensor& output_gradient, const GradientReady& on_ready) {
  return gradient({&target, 1}, sources, {&output_gradient, 1}, on_ready);
}

std::vector<Tensor> GradientTape::gradient(std::span<const Tensor> targets, const std::vector<Variable>& sources,
                                           std::span<const Tensor> output_gradients, const GradientReady& on_ready) {
  std::vector<Tensor> values;
  values.reserve(sources.size());
  for (const auto& v : sources) values.push_back(v.value());
  return walk(targets, values, output_gradients, on_ready);
}

}  // namespace lockstep
