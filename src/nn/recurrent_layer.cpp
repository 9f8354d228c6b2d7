// RecurrentLayer: the options, weights, time loop and mask rule SimpleRNN, LSTM and GRU share
// (Keras 3's RNN layer and backend rnn(): keras/src/layers/rnn/rnn.py,
// keras/src/backend/tensorflow/rnn.py).
#include <nlohmann/json.hpp>

#include "lockstep/layers/recurrent_layers.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/ops_rows.hpp"
#include "nn/config_reader.hpp"
#include "nn/random_draws.hpp"

namespace lockstep::layers {

// The tape adds the gathers' gradients into one buffer of rows' shape (GradientTape's gather
// accumulation), so a call's backward does not grow with the square of the gathers.
Tensor RecurrentLayer::every_nth_row(const Tensor& rows, std::int64_t n, std::int64_t count, std::int64_t at) {
  const Tensor index = device_constant({"RNN rows: count, at", {count, at}}, n, [count, at](std::int64_t m) {
    std::vector<std::int64_t> r(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < m; ++i) r[static_cast<std::size_t>(i)] = i * count + at;
    return Tensor::from_vector(r, Shape{m});
  });
  return gather_rows(rows, index);
}

RecurrentLayer::RecurrentLayer(const RecurrentOptions& o, const char* class_name, int gates, int states)
    : Layer(o.name),
      options_(o),
      class_name_(class_name),
      gates_(gates),
      states_(states),
      activation_(parse_activation(o.activation)),
      recurrent_activation_(parse_activation(o.recurrent_activation)) {
  LOCKSTEP_CHECK(o.units > 0, class_name, ": units must be a positive integer, got ", o.units);
  for (const auto& [key, rate] : {std::pair{"dropout", o.dropout}, std::pair{"recurrent_dropout", o.recurrent_dropout}})
    LOCKSTEP_CHECK(rate >= 0.0f && rate < 1.0f, class_name, ": ", key, " must be in [0, 1), got ", rate);
  for (const auto* init : {&o.kernel_initializer, &o.recurrent_initializer, &o.bias_initializer})
    (void)Initializer{*init}(Shape{0}, 0);  // an unknown name is refused now, not at build
}

Shape RecurrentLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() == 3, "layer '", name(), "' (", class_name_,
                 ") needs inputs of shape (batch, steps, features), got ", s.str());
  if (options_.return_sequences) return Shape{s[0], s[1], options_.units};
  return Shape{s[0], options_.units};
}

Shape RecurrentLayer::bias_shape() const { return Shape{gates_ * options_.units}; }

Tensor RecurrentLayer::initial_bias(std::uint64_t seed) const {
  return Initializer{options_.bias_initializer}(bias_shape(), seed);
}

void RecurrentLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  LOCKSTEP_CHECK(s[2] > 0, "layer '", name(), "' (", class_name_, "): input shape ", s.str(), " has no features");
  const std::int64_t u = options_.units;
  // The dropout masks' stream: the layer's own seed's, else its build seed (as before seeds were taken).
  constexpr std::uint64_t kRecurrentDropoutTag = 0x524e4e44726f7000ULL;  // "RNNDrop"
  dropout_stream_ = layer_stream(kRecurrentDropoutTag, options_.seed, seed);
  // Keras' order (and so its weight file's): kernel, recurrent_kernel, bias.
  kernel_ = add_weight("kernel", Shape{s[2], gates_ * u}, Initializer{options_.kernel_initializer}, mix_seed(seed, 1));
  recurrent_kernel_ = add_weight("recurrent_kernel", Shape{u, gates_ * u}, Initializer{options_.recurrent_initializer},
                                 mix_seed(seed, 2));
  if (options_.use_bias) {
    bias_ = add_weight("bias", bias_shape(), Initializer{"zeros"}, mix_seed(seed, 3));
    const Tensor initial = initial_bias(mix_seed(seed, 3));
    bias_.assign(initial.to(bias_.value().dtype()));
  }
}

Tensor RecurrentLayer::gate(const Tensor& z, int g) const {
  const std::int64_t n = z.dim(0);
  return every_nth_row(reshape(z, {n * gates_, options_.units}), n, gates_, g);
}

RecurrentResult RecurrentLayer::run(const Tensor& x, const Tensor& mask, const std::vector<Tensor>& initial_states,
                                    const CallContext& ctx) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (", class_name_, ") is called before it was built");
  LOCKSTEP_CHECK(x.rank() == 3 && x.dim(2) == kernel_.shape()[0], "layer '", name(), "' (", class_name_,
                 ") was built for inputs ", input_shape().str(), " but receives ", x.shape().str());
  const std::int64_t batch = x.dim(0), steps = x.dim(1), u = options_.units;
  LOCKSTEP_CHECK(steps > 0, "layer '", name(), "' (", class_name_, ") needs at least one step, got ", x.shape().str());
  const DType dt = compute_dtype();

  // Keras' dropout masks (training only), fixed over the steps: with recurrent_dropout, one per
  // gate for the inputs and one per gate for the state (Keras' implementation 1), else one input
  // mask for every gate.
  const auto masks = [&](float rate, std::int64_t width, int count, std::uint64_t which) {
    std::vector<Tensor> out;
    if (!ctx.training || rate == 0.0f) return out;
    for (int g = 0; g < count; ++g) {
      const std::uint64_t stream = mix_seed(dropout_stream_, which * 16 + static_cast<std::uint64_t>(g));
      out.push_back(kept_units(batch, width, dt, rate, random_key(ctx, stream, options_.seed)));
    }
    return out;
  };
  const std::int64_t features = x.dim(2);
  const bool per_gate = options_.recurrent_dropout > 0.0f;
  const std::vector<Tensor> input_masks = masks(options_.dropout, features, per_gate ? gates_ : 1, 1);
  const std::vector<Tensor> state_masks = masks(options_.recurrent_dropout, u, gates_, 2);

  // The input projection of every step at once, time-major (x transposed once): step t's rows are
  // the block [t * batch, (t + 1) * batch) of [steps * batch, gates * units], which each step reads
  // as a view (slice_rows: no copy, and its gradient added in place into one buffer).
  const Tensor kernel = autocast(kernel_.value()), xs = transpose(autocast(x), {1, 0, 2});
  const Tensor bias = bias_.defined() ? autocast(bias_.value()) : Tensor();
  const Tensor in_bias = bias.defined() ? input_bias(bias) : Tensor();
  const auto rows_of = [&](const Tensor* mask) {  // x through a mask [batch, features], as [steps * batch, features]
    return reshape(mask ? mul(xs, reshape(*mask, {1, batch, features})) : xs, {steps * batch, features});
  };
  const auto step_rows = [batch](const Tensor& rows, std::int64_t t) {  // step t's [batch, ...]
    return slice_rows(rows, t * batch, (t + 1) * batch);
  };
  Tensor projected;
  if (input_masks.size() <= 1) {
    projected =
        dense(rows_of(input_masks.empty() ? nullptr : &input_masks[0]), kernel, in_bias, FusedActivation::kNone);
  } else {
    std::vector<Tensor> parts;
    for (int g = 0; g < gates_; ++g)
      parts.push_back(matmul(rows_of(&input_masks[static_cast<std::size_t>(g)]), gate(kernel, g)));
    projected = concatenate(parts, -1);
    if (in_bias.defined()) projected = add(projected, in_bias);
  }
  StepInputs in{.recurrent_kernel = autocast(recurrent_kernel_.value()),
                .recurrent_bias = bias.defined() ? recurrent_bias(bias) : Tensor()};
  if (!state_masks.empty())
    for (int g = 0; g < gates_; ++g) in.kernel_gates.push_back(gate(in.recurrent_kernel, g));

  // Keras' mask rule (backend rnn()): where a step is dropped, each state keeps its value and the
  // output is the previous step's output (zeros before the first kept step; zeros at every
  // dropped step with zero_output_for_mask), chosen by where() as Keras' tf.where: the value not
  // chosen never reaches the result.
  Tensor keep;
  if (mask.defined()) {
    LOCKSTEP_CHECK(mask.rank() == 2 && mask.dim(0) == batch && mask.dim(1) == steps, "layer '", name(), "' (",
                   class_name_, "): a mask of shape ", mask.shape().str(), " does not fit inputs ", x.shape().str(),
                   " (it must be (batch, steps))");
    // uint8 0 / 1, where()'s own condition: no compare per step; time-major as the projection.
    keep = reshape(transpose(not_equal(mask, Tensor::zeros(Shape{}, mask.dtype())), {1, 0}), {steps * batch, 1});
  }

  std::vector<Tensor> states;
  if (initial_states.empty()) {
    for (int s = 0; s < states_; ++s) states.push_back(Tensor::zeros(Shape{batch, u}, dt));
  } else {
    LOCKSTEP_CHECK(static_cast<int>(initial_states.size()) == states_, "layer '", name(), "' (", class_name_, ") has ",
                   states_, " state(s), got ", initial_states.size(), " initial states");
    for (const Tensor& s : initial_states) {
      LOCKSTEP_CHECK(s.rank() == 2 && s.dim(0) == batch && s.dim(1) == u, "layer '", name(), "' (", class_name_,
                     "): an initial state must be (batch, units) = (", batch, ", ", u, "), got ", s.shape().str());
      states.push_back(autocast(s));
    }
  }

  Tensor output = Tensor::zeros(Shape{batch, u}, dt);  // the previous step's output
  std::vector<Tensor> outputs;
  for (std::int64_t i = 0; i < steps; ++i) {
    const std::int64_t t = options_.go_backwards ? steps - 1 - i : i;
    in.projected = step_rows(projected, t);
    in.masked_states.clear();
    if (state_masks.empty()) {
      in.recurrent = matmul(states[0], in.recurrent_kernel);
    } else {
      std::vector<Tensor> parts;
      for (std::size_t g = 0; g < state_masks.size(); ++g) {
        in.masked_states.push_back(mul(states[0], state_masks[g]));
        parts.push_back(matmul(in.masked_states.back(), in.kernel_gates[g]));
      }
      in.recurrent = concatenate(parts, -1);
    }
    std::vector<Tensor> next = step(in, states);
    Tensor out = next[0];
    if (mask.defined()) {
      const Tensor k = step_rows(keep, t);
      for (std::size_t s = 0; s < next.size(); ++s) next[s] = where(k, next[s], states[s]);
      out = where(k, out, options_.zero_output_for_mask ? Tensor::zeros(Shape{}, dt) : output);
    }
    states = std::move(next);
    output = out;
    if (options_.return_sequences) outputs.push_back(out);
  }
  RecurrentResult r;
  r.output = output;
  if (options_.return_sequences)  // time-major blocks (concatenated as block copies), transposed once
    r.output = transpose(reshape(concatenate(outputs, 0), {steps, batch, u}), {1, 0, 2});
  r.states = std::move(states);
  return r;
}

Tensor RecurrentLayer::call(const Tensor& x, const CallContext& ctx) const { return run(x, Tensor(), {}, ctx).output; }

Tensor RecurrentLayer::call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const {
  return run(x, mask, {}, ctx).output;
}

std::size_t RecurrentLayer::output_count(const CallOptions&) const {
  return options_.return_state ? 1 + static_cast<std::size_t>(states_) : 1;
}

std::string RecurrentLayer::describe_outputs(const CallOptions& options) const {
  return options_.return_state ? "its output and its states (return_state=True)" : Layer::describe_outputs(options);
}

std::vector<Shape> RecurrentLayer::more_output_shapes(const std::vector<Shape>& inputs, const CallOptions& options) const {
  return std::vector<Shape>(output_count(options) - 1, Shape{inputs.front()[0], options_.units});
}

void RecurrentLayer::check_call_arguments(const CallSignature& call) const {
  refuse_other_arguments(call, {.initial_state = true});
  if (!call.initial_state) return;
  const std::vector<Shape>& states = *call.initial_state;
  LOCKSTEP_CHECK(states.size() == static_cast<std::size_t>(states_), "layer '", name(), "' (", class_name(), ") has ",
                 states_, " state(s) but is given ", states.size(), " initial states");
  const Shape want{-1, options_.units};
  for (const Shape& h : states)
    LOCKSTEP_CHECK(h.rank() == 2 && h[1] == options_.units, "layer '", name(), "' (", class_name(), ")'s initial "
                   "states must have shape (batch, units) = ", want.str(), ", got ", h.str());
}

std::vector<Tensor> RecurrentLayer::call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                                 const CallContext& ctx) const {
  RecurrentResult r = run(inputs.front(), args.masks.empty() ? Tensor() : args.masks.front(), args.initial_state, ctx);
  std::vector<Tensor> outs{std::move(r.output)};
  if (options_.return_state) outs.insert(outs.end(), r.states.begin(), r.states.end());
  return outs;
}

Tensor RecurrentLayer::compute_mask(const Tensor&, const Tensor& mask) const {
  return options_.return_sequences ? mask : Tensor();
}

std::string RecurrentLayer::keras_weight_path(std::size_t index) const { return "cell/vars/" + std::to_string(index); }

nlohmann::json RecurrentLayer::get_config() const {
  nlohmann::json c = Layer::get_config();
  const auto& o = options_;
  c.update({{"units", o.units},
            {"activation", activation_name(activation_)},
            {"use_bias", o.use_bias},
            {"kernel_initializer", o.kernel_initializer},
            {"recurrent_initializer", o.recurrent_initializer},
            {"bias_initializer", o.bias_initializer},
            {"return_sequences", o.return_sequences},
            {"return_state", o.return_state},
            {"go_backwards", o.go_backwards},
            {"zero_output_for_mask", o.zero_output_for_mask},
            {"dropout", o.dropout},
            {"recurrent_dropout", o.recurrent_dropout},
            {"seed", seed_to_json(o.seed)}});
  return c;
}

RecurrentOptions RecurrentLayer::options_from_config(const nlohmann::json& c, const char* class_name) {
  // Options lockstep does not run are refused by name: a .keras file's pass the registry's
  // keras_fixed first; lockstep's own configs never hold them, Python's may.
  auto r = layer_config_reader(class_name, c);
  // stateful, unroll and return_state: Keras' None is False.
  const auto flag = [&r](const char* key) { return r.raw(key) && r.boolean(key); };
  for (const char* key : {"stateful", "unroll"})
    LOCKSTEP_CHECK(!flag(key), class_name, ": ", key, "=True is not supported by lockstep");
  RecurrentOptions o;
  o.units = r.integer("units");
  o.activation = r.string("activation", o.activation);
  o.recurrent_activation = r.string("recurrent_activation", o.recurrent_activation);
  o.use_bias = r.boolean("use_bias", o.use_bias);
  o.kernel_initializer = r.string("kernel_initializer", o.kernel_initializer);
  o.recurrent_initializer = r.string("recurrent_initializer", o.recurrent_initializer);
  o.bias_initializer = r.string("bias_initializer", o.bias_initializer);
  o.unit_forget_bias = r.boolean("unit_forget_bias", o.unit_forget_bias);
  o.reset_after = r.boolean("reset_after", o.reset_after);
  o.return_sequences = r.boolean("return_sequences", o.return_sequences);
  o.return_state = flag("return_state");
  o.go_backwards = r.boolean("go_backwards", o.go_backwards);
  o.zero_output_for_mask = r.boolean("zero_output_for_mask", o.zero_output_for_mask);
  o.dropout = r.real("dropout", o.dropout);
  o.recurrent_dropout = r.real("recurrent_dropout", o.recurrent_dropout);
  o.seed = seed_from_config(c);
  o.name = r.string("name");
  return o;
}

}  // namespace lockstep::layers
