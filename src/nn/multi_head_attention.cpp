#include "lockstep/layers/multi_head_attention.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/tensor/attention.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

MultiHeadAttentionLayer::MultiHeadAttentionLayer(const MultiHeadAttentionOptions& o)
    : MergeLayer(o.name), options_(o) {
  LOCKSTEP_CHECK(
      o.num_heads > 0 && o.key_dim > 0 && o.value_dim.value_or(1) > 0 && o.output_shape.value_or(1) > 0,
      "MultiHeadAttention: num_heads, key_dim, value_dim and output_shape must be positive, got ",
      o.num_heads, ", ", o.key_dim, ", ", o.value_dim.value_or(o.key_dim), " and ",
      o.output_shape.value_or(1));
  LOCKSTEP_CHECK(o.dropout >= 0.0f && o.dropout < 1.0f, "MultiHeadAttention: dropout must be in [0, 1), got ",
                 o.dropout);
  for (const auto* init : {&o.kernel_initializer, &o.bias_initializer}) (void)Initializer{*init}(Shape{0}, 0);
}

Shape MultiHeadAttentionLayer::merge_output_shape(const std::vector<Shape>& s) const {
  LOCKSTEP_CHECK(s.size() == 2 || s.size() == 3, "layer '", name(),
                 "' (MultiHeadAttention) is called on [query, value] or [query, value, key], got ", s.size(),
                 " inputs: ", shapes_str(s));
  for (const Shape& x : s)
    LOCKSTEP_CHECK(
        x.rank() == 3 && x[2] == s[0][2], "layer '", name(),
        "' (MultiHeadAttention) takes [batch, length, features] inputs with the query's features, got ",
        shapes_str(s));
  LOCKSTEP_CHECK(s.size() == 2 || s[2][1] == s[1][1], "layer '", name(),
                 "' (MultiHeadAttention): key and value must have one length, got ", shapes_str(s));
  if (built())
    LOCKSTEP_CHECK(s[0][2] == input_shape()[2], "layer '", name(),
                   "' (MultiHeadAttention) was built for features ", input_shape()[2], " but is called on ",
                   shapes_str(s));
  return Shape{s[0][0], s[0][1], options_.output_shape.value_or(s[0][2])};
}

void MultiHeadAttentionLayer::build_impl(const Shape& q, std::uint64_t seed) {
  LOCKSTEP_CHECK(q.rank() == 3 && q[2] > 0, "layer '", name(),
                 "' (MultiHeadAttention) takes [batch, length, features] inputs, got ", q.str());
  const std::int64_t features = q[2], heads = options_.num_heads,
                     out = options_.output_shape.value_or(features);
  const Initializer kernel{options_.kernel_initializer}, bias{options_.bias_initializer};
  std::uint64_t n = 0;
  // Keras' order: query, key, value, attention_output; kernel then bias.
  const auto add = [&](Projection& p, const char* which, const Shape& kernel_shape, const Shape& bias_shape) {
    p.kernel = add_weight(std::string(which) + "/kernel", kernel_shape, kernel, mix_seed(seed, ++n));
    if (options_.use_bias)
      p.bias = add_weight(std::string(which) + "/bias", bias_shape, bias, mix_seed(seed, ++n));
  };
  add(query_, "query", {features, heads, options_.key_dim}, {heads, options_.key_dim});
  add(key_, "key", {features, heads, options_.key_dim}, {heads, options_.key_dim});
  add(value_, "value", {features, heads, value_dim()}, {heads, value_dim()});
  add(output_, "attention_output", {heads, value_dim(), out}, {out});
  stream_ = seed;
}

// x [batch, length, features] through a [features, heads, per_head] kernel: [batch, length, heads,
// per_head], the dense product's rows as they come (attention reads the heads in that layout).
Tensor MultiHeadAttentionLayer::project(const Projection& p, const Tensor& x, std::int64_t per_head) const {
  const std::int64_t b = x.dim(0), len = x.dim(1), f = x.dim(2), heads = options_.num_heads;
  const Tensor kernel = reshape(autocast(p.kernel.value()), {f, heads * per_head});
  const Tensor bias = p.bias.defined() ? reshape(autocast(p.bias.value()), {heads * per_head}) : Tensor();
  const Tensor y = dense(reshape(x, {b * len, f}), kernel, bias);
  return reshape(y, {b, len, heads, per_head});
}

namespace {
// Keras masks (any dtype, nonzero where a step counts) as uint8 0 / 1, combined by comparisons
// (which broadcast and write uint8): no float copy of a [batch, queries, keys] mask is made.
Tensor kept(const Tensor& mask) { return not_equal(mask, Tensor::zeros(Shape{}, mask.dtype())); }
// keep & mask for `keep` 0 / 1 and `mask` any Keras mask, broadcast: keep > (mask == 0).
Tensor kept_by_both(const Tensor& keep, const Tensor& mask) {
  return greater(keep, equal(mask, Tensor::zeros(Shape{}, mask.dtype())));
}
}  // namespace

// Keras' _compute_attention_mask: query_mask[:, :, None] & value_mask[:, None, :] &
// key_mask[:, None, :] & attention_mask (and the causal mask, which the kernel applies). The
// cheapest form the kernel takes: the value's and key's masks alone stay [batch, value length].
// A padded query step then has no step to attend to: the kernel gives it uniform probabilities,
// as Keras' masked softmax.
Tensor MultiHeadAttentionLayer::attention_mask(const Tensor& query, const Tensor& value,
                                               const AttentionCall& call) const {
  const std::int64_t b = query.dim(0), t = query.dim(1), s = value.dim(1);
  const auto check = [&](const Tensor& mask, const char* which, std::int64_t steps, const char* input) {
    LOCKSTEP_CHECK(!mask.defined() || mask.shape() == (Shape{b, steps}), "layer '", name(), "' (MultiHeadAttention): ",
                   which, " must have the shape of the ", input, "'s steps (", b, ", ", steps, "), got ",
                   mask.shape().str());
  };
  check(call.query_mask, "query_mask", t, "query");
  check(call.value_mask, "value_mask", s, "value");
  check(call.key_mask, "key_mask", s, "value");
  const Tensor &q = call.query_mask, &v = call.value_mask, &k = call.key_mask, &given = call.attention_mask;
  // The value steps the value's and the key's masks keep: 0 / 1 (attention_reference multiplies
  // by it) [b, s], undefined where neither is.
  Tensor steps = v.defined() ? kept(v) : Tensor();
  if (k.defined()) steps = steps.defined() ? kept_by_both(steps, k) : kept(k);
  if (!q.defined() && !given.defined()) return steps;
  if (!q.defined() && !steps.defined()) return given;
  Tensor keep;  // 0 / 1, broadcast to [b, t, s] as it is made
  if (q.defined()) {
    keep = reshape(kept(q), {b, t, 1});
    keep = steps.defined() ? kept_by_both(keep, reshape(steps, {b, 1, s}))
                           : greater(keep, Tensor::zeros(Shape{1, 1, s}, DType::kU8));
  } else {
    keep = reshape(steps, {b, 1, s});
  }
  if (given.defined())
    keep = kept_by_both(keep, given.rank() == 2 ? reshape(given, {given.dim(0), 1, given.dim(1)}) : given);
  return keep;
}

Tensor MultiHeadAttentionLayer::attend(const Tensor& query, const Tensor& value, const Tensor& key,
                                       const CallContext& ctx, const AttentionCall& call) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (MultiHeadAttention) is called before it was built");
  std::vector<Shape> shapes{query.shape(), value.shape()};
  if (key.defined()) shapes.push_back(key.shape());
  const Shape out_shape = merge_output_shape(shapes);
  const Tensor q = project(query_, autocast(query), options_.key_dim);
  const Tensor k = project(key_, autocast(key.defined() ? key : value), options_.key_dim);
  const Tensor v = project(value_, autocast(value), value_dim());
  AttentionOptions o{.causal = call.use_causal_mask,
                     .scale = 1.0f / std::sqrt(static_cast<float>(options_.key_dim)),
                     .heads_last = true};
  if (ctx.training && options_.dropout > 0) {
    o.dropout_rate = options_.dropout;
    o.dropout_key = {.seed = ctx.seed,
                     .stream = stream_,
                     .step = ctx.step,
                     .first_example = ctx.first_example,
                     .step_block = ctx.step_block};
  }
  const Tensor mask = attention_mask(query, value, call);
  const Tensor heads = call.attention_scores ? attention_reference(q, k, v, mask, o, call.attention_scores)
                                             : scaled_dot_product_attention(q, k, v, mask, o);
  // [batch, length, heads, value_dim] -> [batch * length, heads * value_dim] @ [heads * value_dim, out].
  const std::int64_t b = query.dim(0), len = query.dim(1), out = out_shape[2];
  const Tensor merged = reshape(heads, {b * len, options_.num_heads * value_dim()});
  const Tensor kernel = reshape(autocast(output_.kernel.value()), {options_.num_heads * value_dim(), out});
  const Tensor bias = output_.bias.defined() ? autocast(output_.bias.value()) : Tensor();
  return reshape(dense(merged, kernel, bias), {b, len, out});
}

std::string MultiHeadAttentionLayer::keras_weight_path(std::size_t index) const {
  static const char* const kSublayers[] = {"query_dense", "key_dense", "value_dense", "output_dense"};
  const std::size_t per = options_.use_bias ? 2 : 1;
  return std::string(kSublayers[std::min<std::size_t>(index / per, 3)]) + "/vars/" +
         std::to_string(index % per);
}

nlohmann::json MultiHeadAttentionLayer::keras_build_config(const nlohmann::json& input_shapes) const {
  nlohmann::json dict = {{"query_shape", input_shapes.at(0)}, {"value_shape", input_shapes.at(1)}};
  if (input_shapes.size() > 2) dict["key_shape"] = input_shapes.at(2);
  return {{"shapes_dict", dict}};
}

Tensor MultiHeadAttentionLayer::merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const {
  LOCKSTEP_CHECK(inputs.size() == 2 || inputs.size() == 3, "layer '", name(),
                 "' (MultiHeadAttention) is called on [query, value] or [query, value, key], got ",
                 inputs.size(), " inputs");
  return attend(inputs[0], inputs[1], inputs.size() == 3 ? inputs[2] : Tensor(), ctx);
}

std::vector<Tensor> MultiHeadAttentionLayer::call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                                          const CallContext& ctx) const {
  // Keras' mha(query, value, key, attention_mask=, use_causal_mask=): the inputs' masks are its
  // query_mask, value_mask and key_mask (layer.py's "Populate mask argument(s)").
  const auto mask = [&](std::size_t i) { return i < args.masks.size() ? args.masks[i] : Tensor(); };
  Tensor scores;
  AttentionCall attention{.query_mask = mask(0),
                          .value_mask = mask(1),
                          .key_mask = mask(2),
                          .use_causal_mask = args.options.use_causal_mask,
                          .attention_scores = args.options.return_attention_scores ? &scores : nullptr};
  if (args.attention_mask.defined()) attention.attention_mask = cast(args.attention_mask, DType::kU8);
  Tensor out = attend(inputs[0], inputs[1], inputs.size() > 2 ? inputs[2] : Tensor(), ctx, attention);
  if (!args.options.return_attention_scores) return {std::move(out)};
  return {std::move(out), std::move(scores)};
}

std::string MultiHeadAttentionLayer::describe_outputs(const CallOptions& options) const {
  return options.return_attention_scores ? "its output and its attention scores (return_attention_scores=True)"
                                         : Layer::describe_outputs(options);
}

void MultiHeadAttentionLayer::check_call_arguments(const CallSignature& call) const {
  refuse_other_arguments(call, {.attention_mask = true, .use_causal_mask = true, .return_attention_scores = true});
  if (!call.attention_mask) return;
  const Shape want{-1, call.inputs[0][1], call.inputs[1][1]};
  LOCKSTEP_CHECK(*call.attention_mask == want, "layer '", name(), "' (", class_name(), ")'s attention_mask must have "
                 "shape ", want.str(), " (batch, query length, value length), got ", call.attention_mask->str());
}

std::vector<Shape> MultiHeadAttentionLayer::more_output_shapes(const std::vector<Shape>& inputs,
                                                               const CallOptions& options) const {
  if (!options.return_attention_scores) return {};
  return {Shape{inputs[0][0], options_.num_heads, inputs[0][1], inputs[1][1]}};
}

Tensor MultiHeadAttentionLayer::merge_mask(const std::vector<Tensor>&, const std::vector<Tensor>& masks) const {
  return masks.empty() ? Tensor() : masks.front();
}

nlohmann::json MultiHeadAttentionLayer::get_config() const {
  nlohmann::json c = Layer::get_config();
  const auto& o = options_;
  c.update({{"num_heads", o.num_heads},
            {"key_dim", o.key_dim},
            {"value_dim", value_dim()},
            {"dropout", o.dropout},
            {"use_bias", o.use_bias},
            {"output_shape", o.output_shape ? nlohmann::json(*o.output_shape) : nlohmann::json()},
            {"kernel_initializer", o.kernel_initializer},
            {"bias_initializer", o.bias_initializer}});
  return c;
}

LayerPtr MultiHeadAttentionLayer::from_config(const nlohmann::json& c) {
  auto r = layer_config_reader("MultiHeadAttention", c);
  MultiHeadAttentionOptions o;
  o.num_heads = r.integer("num_heads");
  o.key_dim = r.integer("key_dim");
  if (r.raw("value_dim")) o.value_dim = r.integer("value_dim");
  o.dropout = r.real("dropout", o.dropout);
  o.use_bias = r.boolean("use_bias", o.use_bias);
  if (const nlohmann::json* shape = r.raw("output_shape")) {
    const auto& s = *shape;
    // Keras writes an int or a one-element list (the output's last dimension).
    LOCKSTEP_CHECK(s.is_number_integer() || (s.is_array() && s.size() == 1 && s[0].is_number_integer()),
                   "MultiHeadAttention: output_shape must be one dimension (lockstep projects onto the last "
                   "axis only), got ",
                   s.dump());
    o.output_shape = s.is_array() ? s[0].get<std::int64_t>() : s.get<std::int64_t>();
  }
  o.kernel_initializer = r.string("kernel_initializer", o.kernel_initializer);
  o.bias_initializer = r.string("bias_initializer", o.bias_initializer);
  o.name = r.string("name");
  return std::make_shared<MultiHeadAttentionLayer>(o);
}

LayerPtr MultiHeadAttention(const MultiHeadAttentionOptions& options) {
  return std::make_shared<MultiHeadAttentionLayer>(options);
}

}  // namespace lockstep::layers
