// Model::fit: a loop over epochs whose parts (detail::FitLoop, fit_loop.hpp) read and train
// groups of batches, resume from a backup and make each epoch's logs.
#include <cmath>
#include <charconv>
#include <cstdio>

#include "lockstep/layers/initializers.hpp"
#include "lockstep/training/model.hpp"
#include "training/fit_loop.hpp"
#include "training/sample_weights.hpp"

namespace lockstep {
namespace {

// Splits the tensors (inputs, then targets) into the training part and the held-out last
// `split` fraction.
std::pair<data::Dataset, std::optional<data::Dataset>> split_xy(const data::Element& xy, const FitOptions& o) {
  LOCKSTEP_CHECK(o.validation_split >= 0.0 && o.validation_split < 1.0,
                 "fit: validation_split must be in [0, 1), got ", o.validation_split);
  LOCKSTEP_CHECK(o.batch_size > 0, "fit: batch_size must be positive, got ", o.batch_size);
  const std::int64_t n = xy.front().dim(0);
  const auto n_val = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * o.validation_split));
  const std::int64_t n_train = n - n_val;
  const auto rows = [&](std::int64_t begin, std::int64_t end) {
    data::Element part;
    for (const Tensor& t : xy) part.push_back(t.slice(begin, end));
    return data::Dataset::from_tensor_slices(std::move(part));
  };
  data::Dataset train = rows(0, n_train);
  if (o.shuffle) train = train.shuffle(n_train, layers::mix_seed(random_seed(), 0x5f17));
  train = train.batch(o.batch_size);
  std::optional<data::Dataset> val;
  if (n_val > 0) val = rows(n_train, n).batch(o.batch_size);
  return {train, val};
}

// The metric totals a backup stored under "metrics/<name>/<i>".
std::map<std::string, std::vector<double>> resumed_metric_states(const io::TrainingState& st) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [key, value] : st.values) {
    if (key.rfind("metrics/", 0) != 0) continue;
    const auto slash = key.rfind('/');
    // A key this code did not write (a metric's state has a handful of numbers) is not restored.
    std::size_t index = 0;
    const char* first = key.data() + slash + 1;
    const char* last = key.data() + key.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (slash < 8 || ec != std::errc() || end != last || first == last || index >= 64) continue;
    const std::string name = key.substr(8, slash - 8);
    auto& v = out[name];
    if (v.size() <= index) v.resize(index + 1, 0.0);
    v[index] = value;
  }
  return out;
}

void warn_input_ran_out() {
  std::fprintf(stderr,
               "WARNING: your input ran out of data; interrupting training. Make sure that your dataset can "
               "generate at least steps_per_epoch * epochs batches (use repeat()).\n");
}

}  // namespace

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  LOCKSTEP_CHECK(x.rank() >= 1 && y.rank() >= 1 && x.dim(0) == y.dim(0), "fit: x ", x.shape().str(), " and y ",
                 y.shape().str(), " must have the same number of examples");
  return fit_split({x, y}, options);
}

History Model::fit(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, const FitOptions& options) {
  return fit_split(detail::tensor_components(*this, xs, ys, "fit"), options);
}

History Model::fit_split(const data::Element& xy, const FitOptions& options) {
  // sample_weight joins the tensors before the split, so that the held-out rows keep theirs;
  // class_weight stays in the options, which fit(dataset) maps over the training batches alone:
  // Keras 3 splits first and weighs by class only what it trains on (val_loss is unweighted).
  detail::check_one_kind_of_weights(options.sample_weight.defined() || !options.sample_weights.empty(),
                                    options.class_weight, "fit");
  auto [train, val] =
      split_xy(detail::with_sample_weights(*this, xy, options.sample_weight, options.sample_weights, "fit"), options);
  FitOptions o = options;
  if (val && !o.validation_data) o.validation_data = *val;
  o.validation_split = 0.0;
  o.sample_weight = Tensor();
  o.sample_weights.clear();
  return fit(train, o);
}

History Model::fit(const data::Dataset& dataset, const FitOptions& o) {
  check_compiled("fit");
  check_strategy_scope("fit");
  detail::check_no_sample_weight_beside(o.sample_weight.defined() || !o.sample_weights.empty(), "fit");
  if (!o.class_weight.empty()) {
    FitOptions weighted = o;
    weighted.class_weight.clear();
    return fit(detail::with_class_weights(*this, dataset, o.class_weight), weighted);
  }
  detail::FitLoop loop(*this, dataset, o);
  Logs& logs = loop.logs;
  loop.callbacks.each([&](Callback& c) { c.on_train_begin(logs); });
  const detail::ResumePoint at = loop.resume();
  if (strategy_ && strategy_->num_workers() > 1) check_workers_start_alike(at.epoch, at.batch);
  detail::EpochInput input = loop.open_input(at);
  for (int epoch = at.epoch; epoch < o.epochs && !stop_training; ++epoch) {
    reset_metrics();
    const std::int64_t first_step = epoch == at.epoch ? at.batch : 0;
    if (first_step > 0) set_metric_states(resumed_metric_states(*at.state));
    loop.callbacks.each([&](Callback& c) { c.on_epoch_begin(epoch, logs); });
    const detail::EpochTally tally = loop.train_epoch(input, epoch == at.epoch, first_step);
    if (tally.interrupted) loop.interrupt(epoch, tally.steps_done);  // throws
    if (tally.ran_dry && tally.steps == 0) {
      // Nothing ran this epoch: report no epoch rather than one with empty (zero) logs.
      warn_input_ran_out();
      break;
    }
    logs = loop.epoch_logs(tally);
    gather_optimizer_slots();  // an epoch-end checkpoint (on the chief alone) finds them whole
    loop.callbacks.each([&](Callback& c) { c.on_epoch_end(epoch, logs); });
    loop.history.epoch.push_back(epoch);
    for (const auto& [k, v] : logs) loop.history.history[k].push_back(v);
    if (tally.ran_dry) {
      warn_input_ran_out();
      break;
    }
  }
  gather_optimizer_slots();
  loop.callbacks.each([&](Callback& c) { c.on_train_end(logs); });
  return std::move(loop.history);
}

namespace detail {
data::Element tensor_components(const Model& model, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                                const char* what) {
  const Structure& in = model.input_structure();
  const Structure& out = model.output_structure();
  const bool targets = std::string(what) != "predict";
  LOCKSTEP_CHECK(xs.size() == in.size(), what, ": model '", model.name(), "' takes ", in.size(), " input(s) (",
                 in.joined(), "), got ", xs.size(), " tensor(s)");
  if (targets)
    LOCKSTEP_CHECK(ys.size() == out.size(), what, ": model '", model.name(), "' has ", out.size(), " output(s) (",
                   out.joined(), "), got ", ys.size(), " target tensor(s)");
  data::Element all = xs;
  all.insert(all.end(), ys.begin(), ys.end());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string which = i < xs.size() ? "input '" + in.names[i] + "'" : "target '" + out.names[i - xs.size()] + "'";
    LOCKSTEP_CHECK(all[i].defined() && all[i].rank() >= 1, what, ": ", which, " has no examples (a tensor of rank >= 1 is needed)");
    LOCKSTEP_CHECK(all[i].dim(0) == all[0].dim(0), what, ": ", which, " ", all[i].shape().str(), " and input '",
                   in.names[0], "' ", all[0].shape().str(), " must have the same number of examples");
  }
  return all;
}
}  // namespace detail

}  // namespace lockstep
