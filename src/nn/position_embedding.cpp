#include "lockstep/layers/position_embedding.hpp"

#include <nlohmann/json.hpp>

#include "lockstep/tensor/device_constant.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

using nlohmann::json;

PositionEmbeddingLayer::PositionEmbeddingLayer(const PositionEmbeddingOptions& o) : Layer(o.name), options_(o) {
  LOCKSTEP_CHECK(o.sequence_length > 0, "PositionEmbedding: sequence_length must be positive, got ",
                 o.sequence_length);
  (void)Initializer{o.initializer}(Shape{0}, 0);
}

Shape PositionEmbeddingLayer::compute_output_shape(const Shape& s) const {
  LOCKSTEP_CHECK(s.rank() >= 3, "layer '", name(), "' (PositionEmbedding) needs inputs of shape (batch, steps, ",
                 "features), got ", s.str());
  const std::int64_t steps = s[s.rank() - 2];
  LOCKSTEP_CHECK(steps <= options_.sequence_length, "layer '", name(), "' (PositionEmbedding, sequence_length ",
                 options_.sequence_length, ") receives sequences of ", steps, " steps: ", s.str());
  return s;
}

void PositionEmbeddingLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  LOCKSTEP_CHECK(s.dims().back() > 0, "layer '", name(), "' (PositionEmbedding) needs a known number of features, got ",
                 s.str());
  embeddings_ = add_weight("embeddings", Shape{options_.sequence_length, s.dims().back()},
                           Initializer{options_.initializer}, mix_seed(seed, 1));
}

Tensor PositionEmbeddingLayer::call(const Tensor& x, const CallContext&) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (PositionEmbedding) is called before it was built");
  (void)compute_output_shape(x.shape());
  LOCKSTEP_CHECK(x.dim(-1) == input_shape().dims().back(), "layer '", name(), "' (PositionEmbedding) was built for ",
                 input_shape().str(), " but receives ", x.shape().str());
  Tensor table = autocast(embeddings_.value());
  const std::int64_t steps = x.dim(-2);
  if (steps < options_.sequence_length) {  // keras_hub's slice of the first rows (recorded)
    table = gather_rows(table, device_constant({"PositionEmbedding rows"}, steps, [](std::int64_t n) {
                          std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
                          for (std::int64_t i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)] = i;
                          return Tensor::from_vector(rows, Shape{n});
                        }));
  }
  // Broadcast over the leading axes by adding to zeros [batch, ..., 1, 1]: the tape sums the
  // gradient back down to the table's shape.
  std::vector<std::int64_t> lead(x.shape().dims().begin(), x.shape().dims().end() - 2);
  lead.insert(lead.end(), {1, 1});
  return add(Tensor::zeros(Shape(std::move(lead)), table.dtype()), table);
}

json PositionEmbeddingLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"sequence_length", options_.sequence_length}, {"initializer", options_.initializer}});
  return c;
}

LayerPtr PositionEmbeddingLayer::from_config(const json& c) {
  PositionEmbeddingOptions o;
  auto r = layer_config_reader("PositionEmbedding", c);
  o.sequence_length = r.integer("sequence_length");
  o.initializer = r.string("initializer", o.initializer);
  o.name = r.string("name");
  return std::make_shared<PositionEmbeddingLayer>(o);
}

LayerPtr PositionEmbedding(const PositionEmbeddingOptions& options) {
  return std::make_shared<PositionEmbeddingLayer>(options);
}
LayerPtr PositionEmbedding(std::int64_t sequence_length) {
  return PositionEmbedding(PositionEmbeddingOptions{.sequence_length = sequence_length});
}

}  // namespace lockstep::layers
