#include "lockstep/layers/sequence_layers.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

using nlohmann::json;

// ---- Embedding ----
EmbeddingLayer::EmbeddingLayer(const EmbeddingOptions& o) : Layer(o.name), options_(o) {
  LOCKSTEP_CHECK(o.input_dim > 0 && o.output_dim > 0, "Embedding: input_dim and output_dim must be positive, got ",
                 o.input_dim, " and ", o.output_dim);
  (void)Initializer{o.embeddings_initializer}(Shape{0}, 0);
}

Shape EmbeddingLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() >= 1, "layer '", name(), "' (Embedding) needs inputs with a batch dimension, got ", s.str());
  std::vector<std::int64_t> dims = s.dims();
  dims.push_back(options_.output_dim);
  return Shape(std::move(dims));
}

void EmbeddingLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  embeddings_ = add_weight("embeddings", Shape{options_.input_dim, options_.output_dim},
                           Initializer{options_.embeddings_initializer}, mix_seed(seed, 1));
}

Tensor EmbeddingLayer::call(const Tensor& x, const CallContext&) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (Embedding) is called before it was built");
  // Floats holding indices (a model's input is float) are truncated to integers, as Keras' cast.
  // Integers go to gather_rows as they are: it checks them before its own cast to int64, on the
  // host where the input path kept their host bytes (a cast here would lose them).
  const Tensor idx = is_floating(x.dtype()) ? x.to(DType::kI64) : x;
  Tensor rows;
  try {
    rows = gather_rows(autocast(embeddings_.value()), idx.reshape({idx.numel()}));
  } catch (const ValueError& e) {
    throw ValueError("layer '" + name() + "' (Embedding, input_dim " + std::to_string(options_.input_dim) +
                     "): an index is outside the vocabulary: " + e.what());
  }
  return reshape(rows, compute_output_shape(x.shape()));
}

Tensor EmbeddingLayer::compute_mask(const Tensor& x, const Tensor&) const {
  if (!options_.mask_zero) return Tensor();
  return not_equal(x, Tensor::zeros(Shape{}, x.dtype()));
}

json EmbeddingLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"input_dim", options_.input_dim}, {"output_dim", options_.output_dim},
            {"embeddings_initializer", options_.embeddings_initializer}, {"mask_zero", options_.mask_zero}});
  return c;
}
LayerPtr EmbeddingLayer::from_config(const json& c) {
  auto r = layer_config_reader("Embedding", c);
  EmbeddingOptions o;
  o.input_dim = r.integer("input_dim");
  o.output_dim = r.integer("output_dim");
  o.embeddings_initializer = r.string("embeddings_initializer", o.embeddings_initializer);
  o.mask_zero = r.boolean("mask_zero", false);
  o.name = r.string("name");
  return std::make_shared<EmbeddingLayer>(o);
}

// ---- GlobalAveragePooling1D ----
GlobalAveragePooling1DLayer::GlobalAveragePooling1DLayer(bool keepdims, std::string name)
    : Layer(std::move(name)), keepdims_(keepdims) {}

Shape GlobalAveragePooling1DLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() == 3, "layer '", name(), "' (GlobalAveragePooling1D) needs inputs of shape (batch, steps, ",
                 "features), got ", s.str());
  return keepdims_ ? Shape{s[0], 1, s[2]} : Shape{s[0], s[2]};
}

Tensor GlobalAveragePooling1DLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  return mean(autocast(x), 1, keepdims_);
}

Tensor GlobalAveragePooling1DLayer::call_masked(const Tensor& x, const Tensor& mask, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  LOCKSTEP_CHECK(mask.numel() == x.dim(0) * x.dim(1), "layer '", name(), "' (GlobalAveragePooling1D): mask ",
                 mask.shape().str(), " does not match the steps of ", x.shape().str());
  const Tensor in = autocast(x);
  const Tensor m = cast(mask, in.dtype()).reshape({x.dim(0), x.dim(1), 1});
  return div(sum(mul(in, m), 1, keepdims_), sum(m, 1, keepdims_));
}

json GlobalAveragePooling1DLayer::get_config() const {
  json c = Layer::get_config();
  c["keepdims"] = keepdims_;
  return c;
}
LayerPtr GlobalAveragePooling1DLayer::from_config(const json& c) {
  auto r = layer_config_reader("GlobalAveragePooling1D", c);
  return std::make_shared<GlobalAveragePooling1DLayer>(r.boolean("keepdims", false), r.string("name"));
}

// ---- GlobalMaxPooling1D ----
GlobalMaxPooling1DLayer::GlobalMaxPooling1DLayer(bool keepdims, std::string name)
    : Layer(std::move(name)), keepdims_(keepdims) {}

Shape GlobalMaxPooling1DLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() == 3, "layer '", name(), "' (GlobalMaxPooling1D) needs inputs of shape (batch, steps, ",
                 "features), got ", s.str());
  LOCKSTEP_CHECK(s[1] != 0, "layer '", name(), "' (GlobalMaxPooling1D): input ", s.str(),
                 " has no steps to take the maximum of");
  return keepdims_ ? Shape{s[0], 1, s[2]} : Shape{s[0], s[2]};
}

Tensor GlobalMaxPooling1DLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  return reduce_max(autocast(x), 1, keepdims_);
}

json GlobalMaxPooling1DLayer::get_config() const {
  json c = Layer::get_config();
  c["keepdims"] = keepdims_;
  return c;
}
LayerPtr GlobalMaxPooling1DLayer::from_config(const json& c) {
  auto r = layer_config_reader("GlobalMaxPooling1D", c);
  return std::make_shared<GlobalMaxPooling1DLayer>(r.boolean("keepdims", false), r.string("name"));
}

// ---- RepeatVector ----
RepeatVectorLayer::RepeatVectorLayer(std::int64_t n, std::string name) : Layer(std::move(name)), n_(n) {
  LOCKSTEP_CHECK(n > 0, "RepeatVector: n must be positive, got ", n);
}

Shape RepeatVectorLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() == 2, "layer '", name(), "' (RepeatVector) needs inputs of shape (batch, features), got ",
                 s.str());
  return Shape{s[0], n_, s[1]};
}

Tensor RepeatVectorLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  // Row i of the output is example i / n: one gather, whose gradient adds the n copies back.
  const std::int64_t n = n_;
  const Tensor rows = device_constant({"RepeatVector rows: n", {n}}, x.dim(0), [n](std::int64_t examples) {
    std::vector<std::int64_t> r(static_cast<std::size_t>(examples * n));
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<std::int64_t>(i) / n;
    return Tensor::from_vector(r, {examples, n});
  });
  const Tensor y = gather_rows(autocast(x), rows.reshape({x.dim(0) * n}));
  return reshape(y, compute_output_shape(x.shape()));
}

json RepeatVectorLayer::get_config() const {
  json c = Layer::get_config();
  c["n"] = n_;
  return c;
}
LayerPtr RepeatVectorLayer::from_config(const json& c) {
  auto r = layer_config_reader("RepeatVector", c);
  return std::make_shared<RepeatVectorLayer>(r.integer("n"), r.string("name"));
}

// ---- Permute ----
PermuteLayer::PermuteLayer(std::vector<int> dims, std::string name) : Layer(std::move(name)), dims_(std::move(dims)) {
  std::vector<int> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  bool ok = !dims_.empty();
  for (std::size_t i = 0; i < sorted.size(); ++i) ok = ok && sorted[i] == static_cast<int>(i) + 1;
  std::string given;
  for (int d : dims_) given += (given.empty() ? "" : ", ") + std::to_string(d);
  LOCKSTEP_CHECK(ok, "Permute: dims (", given, ") must be a permutation of 1..", dims_.size(),
                 " (1-based: the batch axis stays first)");
}

Shape PermuteLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() == dims_.size() + 1, "layer '", name(), "' (Permute) permutes ", dims_.size(),
                 " axes after the batch but is given ", s.str());
  std::vector<std::int64_t> out{s[0]};
  for (int d : dims_) out.push_back(s[d]);
  return Shape(std::move(out));
}

Tensor PermuteLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());
  std::vector<int> perm{0};
  perm.insert(perm.end(), dims_.begin(), dims_.end());
  return transpose(autocast(x), perm);
}

json PermuteLayer::get_config() const {
  json c = Layer::get_config();
  c["dims"] = dims_;
  return c;
}
LayerPtr PermuteLayer::from_config(const json& c) {
  auto r = layer_config_reader("Permute", c);
  std::vector<int> dims;
  for (std::int64_t d : r.integers("dims", -(1 << 20), 1 << 20)) dims.push_back(static_cast<int>(d));  // the layer checks them
  return std::make_shared<PermuteLayer>(std::move(dims), r.string("name"));
}

LayerPtr Embedding(std::int64_t input_dim, std::int64_t output_dim, bool mask_zero) {
  return std::make_shared<EmbeddingLayer>(
      EmbeddingOptions{.input_dim = input_dim, .output_dim = output_dim, .mask_zero = mask_zero});
}
LayerPtr Embedding(const EmbeddingOptions& options) { return std::make_shared<EmbeddingLayer>(options); }
LayerPtr GlobalAveragePooling1D(bool keepdims) { return std::make_shared<GlobalAveragePooling1DLayer>(keepdims); }
LayerPtr GlobalMaxPooling1D(bool keepdims) { return std::make_shared<GlobalMaxPooling1DLayer>(keepdims); }
LayerPtr RepeatVector(std::int64_t n) { return std::make_shared<RepeatVectorLayer>(n); }
LayerPtr Permute(std::vector<int> dims) { return std::make_shared<PermuteLayer>(std::move(dims)); }

}  // namespace lockstep::layers
