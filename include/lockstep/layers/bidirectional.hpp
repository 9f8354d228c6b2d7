#pragma once
// Keras 3's Bidirectional wrapper (keras/src/layers/rnn/bidirectional.py) around SimpleRNN, LSTM or
// GRU: a forward copy of the layer (named "forward_<name>") and a backward one (go_backwards=True,
// "backward_<name>"), both made from the layer's config as Keras does, so neither shares the given
// layer's weights; or the given backward_layer, which must differ in go_backwards and agree in
// return_sequences (Keras' _verify_layer_config). Both run on the input and its mask; with
// return_sequences the backward outputs are put back in time order (Keras' ops.flip on axis 1)
// before the merge: "concat" (last axis), "sum", "mul" or "ave". Keras' merge_mode=None gives
// both unmerged, [forward output, backward output]: a call of two tensors in a Functional model
// (lockstep::call_outputs, functional.hpp), each of the forward layer's output shape, both with the
// output's mask (Keras' compute_mask: [mask, mask]); Sequential and call() refuse it by name.
//
// As Keras, both layers output zeros at masked steps when they return sequences (Keras forces
// zero_output_for_mask = return_sequences); the output's mask is the input's with
// return_sequences, none otherwise. The wrapper holds the two layers' weights, the forward's then
// the backward's, which a .keras file keeps under "forward_layer/cell/vars/<i>" and
// "backward_layer/cell/vars/<i>"; its config holds both layers' configs (Keras' "layer" and
// "backward_layer", each {"class_name", "config"}) and merge_mode.
#include <optional>

#include "lockstep/layers/recurrent_layers.hpp"

namespace lockstep::layers {

class BidirectionalLayer final : public Layer {
 public:
  /// `layer` (and `backward_layer` where given) must be a SimpleRNN, LSTM or GRU, without
  /// return_state; merge_mode "concat", "sum", "mul", "ave" or nullopt (Keras' None: two
  /// outputs): ValueError naming each.
  BidirectionalLayer(const LayerPtr& layer, const std::optional<std::string>& merge_mode = "concat",
                     const LayerPtr& backward_layer = nullptr, const std::string& name = "");
  std::string class_name() const override { return "Bidirectional"; }
  const RecurrentLayer& forward_layer() const { return *forward_; }
  const RecurrentLayer& backward_layer() const { return *backward_; }
  const std::optional<std::string>& merge_mode() const { return merge_mode_; }

  /// With merge_mode=None, each output's shape (the forward layer's).
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// Keras' merge_mode=None call: [forward output, backward output], the backward one in time
  /// order with return_sequences. `mask`: the input's (undefined for none).
  std::vector<Tensor> unmerged(const Tensor& x, const Tensor& mask, const CallContext& ctx) const;
  /// A merged mode's output; ValueError naming call_outputs with merge_mode=None (two tensors).
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool supports_masking() const override { return true; }
  /// With merge_mode=None, each output's (Keras' [mask, mask] or [None, None]).
  Tensor compute_mask(const Tensor& x, const Tensor& mask) const override;
  Tensor call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const override;
  bool call_takes_mask() const override { return true; }
  /// With merge_mode=None: two tensors, unmerged's, both with the output's mask.
  std::size_t output_count(const CallOptions&) const override { return merge_mode_ ? 1 : 2; }
  std::string describe_outputs(const CallOptions& options) const override;
  std::vector<Shape> more_output_shapes(const std::vector<Shape>& inputs, const CallOptions& options) const override;
  Tensor more_outputs_mask(const Tensor& output_mask) const override { return output_mask; }
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                   const CallContext& ctx) const override;
  /// "forward_layer/cell/vars/<i>" for the forward layer's weights, then "backward_layer/...".
  std::string keras_weight_path(std::size_t index) const override;
  /// The forward layer under "layer" and in "forward_layer", the backward under "backward_layer".
  std::vector<KerasSublayer> keras_sublayers() const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor merge(const Tensor& x, const Tensor& mask, const CallContext& ctx) const;
  std::shared_ptr<RecurrentLayer> forward_, backward_;
  std::optional<std::string> merge_mode_;
};

LayerPtr Bidirectional(const LayerPtr& layer, const std::optional<std::string>& merge_mode = "concat",
                       const LayerPtr& backward_layer = nullptr);

}  // namespace lockstep::layers
