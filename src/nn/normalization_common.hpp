#pragma once
// What the normalisation layers share: BatchNormalization's and LayerNormalization's fused passes
// run unrecorded and record the gradient of the whole normalisation as one op (record_custom), in
// float32; theirs and GroupNormalization's configs share the learned offset and scale's arguments.
#include "lockstep/tensor/op_record.hpp"
#include "lockstep/tensor/tensor.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers::detail {

// Pauses this thread's tape: the normalisation's passes are recorded as one op.
class RecordingPaused {
 public:
  RecordingPaused() : previous_(set_current_recorder(nullptr)) {}
  ~RecordingPaused() { set_current_recorder(previous_); }
  RecordingPaused(const RecordingPaused&) = delete;
  RecordingPaused& operator=(const RecordingPaused&) = delete;

 private:
  OpRecorder* previous_;
};

// t as float32, unrecorded: 16-bit inputs and gradients are normalised in float32 (as Keras 3:
// their statistics overflow float16) in temporaries, so the tape keeps only the 16-bit tensors.
inline Tensor wide(const Tensor& t) { return t.to(DType::kF32); }

// epsilon, center, scale and their initializers, and the name, read into options `o` (Keras'
// defaults, o's own, where the config leaves them out).
template <typename Options>
Options& read_affine_options(ConfigReader& r, Options& o) {
  o.epsilon = r.real("epsilon", o.epsilon);
  o.center = r.boolean("center", o.center);
  o.scale = r.boolean("scale", o.scale);
  o.beta_initializer = r.string("beta_initializer", o.beta_initializer);
  o.gamma_initializer = r.string("gamma_initializer", o.gamma_initializer);
  o.name = r.string("name");
  return o;
}

}  // namespace lockstep::layers::detail
