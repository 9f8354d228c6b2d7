#pragma once
// What BatchNormalization and LayerNormalization share: their fused passes run unrecorded and
// record the gradient of the whole normalisation as one op (record_custom), in float32.
#include "lockstep/tensor/op_record.hpp"
#include "lockstep/tensor/tensor.hpp"

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

}  // namespace lockstep::layers::detail
