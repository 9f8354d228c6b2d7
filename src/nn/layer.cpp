#include "lockstep/layers/layer.hpp"

#include <atomic>
#include <nlohmann/json.hpp>

#include "lockstep/layers/activations.hpp"
#include "nn/weight_check.hpp"

namespace lockstep::layers {

Shape with_batch_dim(const Shape& per_example) {
  std::vector<std::int64_t> dims{-1};
  dims.insert(dims.end(), per_example.dims().begin(), per_example.dims().end());
  return Shape(std::move(dims));
}

Layer::Layer(std::string name) : name_(std::move(name)) {}

nlohmann::json Layer::get_config() const { return {{"name", name_}}; }
std::string Layer::keras_weight_path(std::size_t index) const { return "vars/" + std::to_string(index); }
void Layer::check_call_mask(const Shape& mask, const Shape& input) const {
  bool steps = input.rank() >= 2 && mask.rank() + 1 == input.rank();
  for (std::size_t d = 0; steps && d < mask.rank(); ++d) {
    const std::int64_t m = mask.dims()[d], i = input.dims()[d];
    steps = m < 0 || i < 0 || m == i;
  }
  LOCKSTEP_CHECK(steps, "layer '", name_, "' (", class_name(), "): a mask must mark the steps of its input ",
                 input.str(), " (its shape without the last axis), got a mask of shape ", mask.str());
}

std::string Layer::describe_outputs(const CallOptions&) const { return "its output"; }

void Layer::refuse_other_arguments(const CallSignature& call, const AcceptedArguments& accepted) const {
  const auto refuse = [&](bool given, bool taken, const char* argument, const char* who) {
    LOCKSTEP_CHECK(!given || taken, "layer '", name_, "' (", class_name(), ") takes no ", argument, " (", who, ")");
  };
  refuse(call.initial_state.has_value(), accepted.initial_state, "initial_state", "SimpleRNN, LSTM and GRU do");
  refuse(call.attention_mask.has_value(), accepted.attention_mask, "attention_mask", "MultiHeadAttention does");
  refuse(call.options.use_causal_mask, accepted.use_causal_mask, "use_causal_mask", "MultiHeadAttention does");
  refuse(call.options.return_attention_scores, accepted.return_attention_scores, "return_attention_scores",
         "MultiHeadAttention does");
}

std::vector<Tensor> Layer::call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                        const CallContext& ctx) const {
  const Tensor mask = args.masks.empty() ? Tensor() : args.masks.front();
  return {mask.defined() ? call_masked(inputs.front(), mask, ctx) : call(inputs.front(), ctx)};
}

nlohmann::json Layer::keras_build_config(const nlohmann::json& input_shapes) const {
  return {{"input_shape", input_shapes}};
}

void Layer::build(const Shape& input_shape, std::uint64_t seed) {
  if (built_) {
    LOCKSTEP_CHECK(input_shape.tail() == input_shape_.tail(), "layer '", name_, "' (", class_name(),
                   ") was built for input shape ", input_shape_.str(), " and cannot take ", input_shape.str());
    return;
  }
  if (declared_input_shape_) {
    LOCKSTEP_CHECK(input_shape.tail() == *declared_input_shape_, "layer '", name_, "' (", class_name(),
                   ") expects input shape ", with_batch_dim(*declared_input_shape_).str(), " but receives ", input_shape.str());
  }
  build_impl(input_shape, seed);
  input_shape_ = input_shape;
  built_ = true;
}

void Layer::build_impl(const Shape&, std::uint64_t) {}

namespace detail {
namespace {
thread_local WeightCheck* innermost_check = nullptr;
}  // namespace

WeightCheck::WeightCheck(WeightCheckFn fn) : fn_(std::move(fn)), outer_(innermost_check) { innermost_check = this; }
WeightCheck::~WeightCheck() { innermost_check = outer_; }
void WeightCheck::run(const Layer& layer, std::size_t index, const Shape& shape) {
  if (innermost_check != nullptr) innermost_check->fn_(layer, index, shape);
}
}  // namespace detail

Variable Layer::add_weight(const std::string& wname, const Shape& shape, const Initializer& init,
                           std::uint64_t seed, bool trainable) {
  return add_weight(shape, init, seed, VariableOptions{.name = wname, .trainable = trainable});
}

namespace {
std::atomic<std::uint64_t> weights_made_count{0};       // Layer::weights_made()
std::atomic<std::uint64_t> trainable_changes_count{0};  // Layer::trainable_changes()
}  // namespace

std::uint64_t Layer::trainable_changes() { return trainable_changes_count.load(std::memory_order_acquire); }

void Layer::set_trainable(bool trainable) {
  if (trainable == trainable_) return;
  trainable_ = trainable;
  // Only the weights made trainable move: a frozen layer's state (moving statistics) never trains.
  for (std::size_t i = 0; i < variables_.size(); ++i)
    if (made_trainable_[i]) variables_[i].set_trainable(trainable);
  trainable_changes_count.fetch_add(1, std::memory_order_release);
}

std::uint64_t Layer::weights_made() { return weights_made_count.load(std::memory_order_acquire); }

Variable Layer::add_weight(const Shape& shape, const Initializer& init, std::uint64_t seed, VariableOptions options) {
  detail::WeightCheck::run(*this, variables_.size(), shape);
  options.name = name_ + "/" + options.name;
  const bool made_trainable = options.trainable;
  options.trainable = options.trainable && trainable_;
  Variable v(init(shape, seed), options);
  variables_.push_back(v);
  made_trainable_.push_back(made_trainable);
  weights_made_count.fetch_add(1, std::memory_order_release);
  return v;
}

void Layer::adopt_weights(const Layer& inner) {
  for (std::size_t i = 0; i < inner.variables_.size(); ++i) {
    variables_.push_back(inner.variables_[i]);
    made_trainable_.push_back(inner.made_trainable_[i]);
    if (!trainable_ && made_trainable_.back()) variables_.back().set_trainable(false);
  }
}

Tensor Layer::autocast(const Tensor& x) const {
  return x.defined() && is_floating(x.dtype()) ? cast(x, compute_dtype()) : x;
}

std::vector<Variable> Layer::trainable_variables() const {
  std::vector<Variable> out;
  for (const auto& v : variables_)
    if (v.trainable()) out.push_back(v);
  return out;
}

std::vector<Variable> Layer::non_trainable_variables() const {
  std::vector<Variable> out;
  for (const auto& v : variables_)
    if (!v.trainable()) out.push_back(v);
  return out;
}

std::int64_t Layer::count_params() const {
  std::int64_t n = 0;
  for (const auto& v : variables_) n += v.shape().numel();
  return n;
}

ActivationKind parse_activation(const std::string& name) {
  if (name.empty() || name == "linear" || name == "none") return ActivationKind::kLinear;
  if (name == "relu") return ActivationKind::kRelu;
  if (name == "sigmoid") return ActivationKind::kSigmoid;
  if (name == "tanh") return ActivationKind::kTanh;
  if (name == "softmax") return ActivationKind::kSoftmax;
  if (name == "gelu") return ActivationKind::kGelu;
  if (name == "log_softmax") return ActivationKind::kLogSoftmax;
  if (name == "silu" || name == "swish") return ActivationKind::kSilu;
  if (name == "elu") return ActivationKind::kElu;
  if (name == "selu") return ActivationKind::kSelu;
  if (name == "leaky_relu") return ActivationKind::kLeakyRelu;
  if (name == "relu6") return ActivationKind::kRelu6;
  if (name == "softplus") return ActivationKind::kSoftplus;
  if (name == "softsign") return ActivationKind::kSoftsign;
  if (name == "hard_sigmoid") return ActivationKind::kHardSigmoid;
  if (name == "hard_silu" || name == "hard_swish") return ActivationKind::kHardSilu;
  if (name == "exponential") return ActivationKind::kExponential;
  if (name == "mish") return ActivationKind::kMish;
  if (name == "celu") return ActivationKind::kCelu;
  if (name == "hard_tanh") return ActivationKind::kHardTanh;
  if (name == "log_sigmoid") return ActivationKind::kLogSigmoid;
  if (name == "hard_shrink") return ActivationKind::kHardShrink;
  if (name == "soft_shrink") return ActivationKind::kSoftShrink;
  if (name == "tanh_shrink") return ActivationKind::kTanhShrink;
  if (name == "squareplus") return ActivationKind::kSquareplus;
  if (name == "sparse_plus") return ActivationKind::kSparsePlus;
  if (name == "sparse_sigmoid") return ActivationKind::kSparseSigmoid;
  // Keras 3's names that lockstep refuses, each for its own reason.
  if (name == "glu")
    throw ValueError("activation 'glu' is not supported by lockstep: it halves the last axis (Keras' "
                     "x1 * sigmoid(x2) of its two halves), which a layer's activation must keep");
  if (name == "sparsemax")
    throw ValueError("activation 'sparsemax' is not supported by lockstep: it needs a sort along the axis, "
                     "which lockstep has no op for");
  if (name == "threshold")
    throw ValueError("activation 'threshold' is not supported: Keras' threshold(x, threshold, default_value) "
                     "has no defaults, so it cannot be given by name (Keras fails when it is called too); use "
                     "keras.layers.ReLU(threshold=...) instead");
  throw ValueError("unknown activation '" + name +
                   "': expected one of linear, relu, sigmoid, tanh, softmax, gelu, log_softmax, silu, swish, elu, "
                   "selu, leaky_relu, relu6, softplus, softsign, hard_sigmoid, hard_silu, hard_swish, exponential, "
                   "mish, celu, hard_tanh, log_sigmoid, hard_shrink, soft_shrink, tanh_shrink, squareplus, "
                   "sparse_plus, sparse_sigmoid");
}

std::string activation_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kLinear: return "linear";
    case ActivationKind::kRelu: return "relu";
    case ActivationKind::kSigmoid: return "sigmoid";
    case ActivationKind::kTanh: return "tanh";
    case ActivationKind::kSoftmax: return "softmax";
    case ActivationKind::kGelu: return "gelu";
    case ActivationKind::kLogSoftmax: return "log_softmax";
    case ActivationKind::kSilu: return "silu";
    case ActivationKind::kElu: return "elu";
    case ActivationKind::kSelu: return "selu";
    case ActivationKind::kLeakyRelu: return "leaky_relu";
    case ActivationKind::kRelu6: return "relu6";
    case ActivationKind::kSoftplus: return "softplus";
    case ActivationKind::kSoftsign: return "softsign";
    case ActivationKind::kHardSigmoid: return "hard_sigmoid";
    case ActivationKind::kHardSilu: return "hard_silu";
    case ActivationKind::kExponential: return "exponential";
    case ActivationKind::kMish: return "mish";
    case ActivationKind::kCelu: return "celu";
    case ActivationKind::kHardTanh: return "hard_tanh";
    case ActivationKind::kLogSigmoid: return "log_sigmoid";
    case ActivationKind::kHardShrink: return "hard_shrink";
    case ActivationKind::kSoftShrink: return "soft_shrink";
    case ActivationKind::kTanhShrink: return "tanh_shrink";
    case ActivationKind::kSquareplus: return "squareplus";
    case ActivationKind::kSparsePlus: return "sparse_plus";
    case ActivationKind::kSparseSigmoid: return "sparse_sigmoid";
  }
  return "linear";
}

Tensor apply_activation(ActivationKind kind, const Tensor& x) {
  switch (kind) {
    case ActivationKind::kLinear: return x;
    case ActivationKind::kRelu: return relu(x);
    case ActivationKind::kSigmoid: return sigmoid(x);
    case ActivationKind::kTanh: return tanh(x);
    case ActivationKind::kSoftmax: return softmax(x);
    case ActivationKind::kGelu: return gelu(x);
    case ActivationKind::kLogSoftmax: return log_softmax(x);
    case ActivationKind::kSilu: return silu(x);
    case ActivationKind::kElu: return elu(x);
    case ActivationKind::kSelu: return selu(x);
    case ActivationKind::kLeakyRelu: return leaky_relu(x);
    case ActivationKind::kRelu6: return relu6(x);
    case ActivationKind::kSoftplus: return softplus(x);
    case ActivationKind::kSoftsign: return softsign(x);
    case ActivationKind::kHardSigmoid: return hard_sigmoid(x);
    case ActivationKind::kHardSilu: return hard_silu(x);
    case ActivationKind::kExponential: return exp(x);
    case ActivationKind::kMish: return mish(x);
    case ActivationKind::kCelu: return celu(x);
    case ActivationKind::kHardTanh: return hard_tanh(x);
    case ActivationKind::kLogSigmoid: return log_sigmoid(x);
    case ActivationKind::kHardShrink: return hard_shrink(x);
    case ActivationKind::kSoftShrink: return soft_shrink(x);
    case ActivationKind::kTanhShrink: return tanh_shrink(x);
    case ActivationKind::kSquareplus: return squareplus(x);
    case ActivationKind::kSparsePlus: return sparse_plus(x);
    case ActivationKind::kSparseSigmoid: return sparse_sigmoid(x);
  }
  return x;
}

}  // namespace lockstep::layers
