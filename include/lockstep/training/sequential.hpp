#pragma once
#include <initializer_list>
#include <set>

#include "lockstep/training/model.hpp"

namespace lockstep {

/// A linear stack of layers. When the first layer declares its input (input_dim, Input), the
/// model is built at once, so shape mismatches between layers are reported at construction.
class Sequential final : public Model {
 public:
  explicit Sequential(std::vector<layers::LayerPtr> layers = {}, std::string name = "sequential");
  Sequential(std::initializer_list<layers::LayerPtr> layers) : Sequential(std::vector<layers::LayerPtr>(layers)) {}

  /// Appends a layer: layers() in the order added. An unnamed layer is named after its class,
  /// numbered (dense, dense_1, ...). ValueError with Keras' message for a name the model holds
  /// already: the same layer added twice, or two layers of one name.
  void add(layers::LayerPtr layer);
  /// Whether this model named layers()[i] (it was added unnamed). Called in another model before
  /// it is built, such a layer is named by that model instead, as a layer called there unnamed:
  /// Keras names layers uniquely per program, so two Sequentials of Dense layers (each holding a
  /// dense) called in one model give it dense and dense_1.
  bool named_layer(std::size_t i) const { return named_.count(layers_.at(i).get()) > 0; }

  void build(const Shape& input_shape) override;
  bool built() const override { return built_; }
  Output forward(const Tensor& x, const layers::CallContext& ctx) const override;

  Shape input_shape() const override;
  Shape output_shape() const override;
  std::string summary() const override;

 private:
  void build_layer(std::size_t i);
  bool holds_name(const std::string& name) const;
  bool built_ = false;
  std::set<const layers::Layer*> named_;  // the layers add() named
  Shape input_shape_;
  std::vector<Shape> output_shapes_;
};

}  // namespace lockstep
