#pragma once
// The text of Keras' model.summary(), for every model class.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/training/model.hpp"

namespace lockstep::detail {

struct SummaryRow {
  const layers::Layer* layer;
  Shape output_shape;
  /// A call that gives several tensors: those after the first (Keras shows "[(None, 4), (None, 4)]").
  std::vector<Shape> more_shapes;
  /// Functional models: the layers whose outputs this one takes ("conv2d[0][0]"), one per line.
  std::vector<std::string> connected_to;
};

/// Keras' table of `model`: "Layer (type)", "Output Shape", "Param #" (and "Connected to" when
/// `connected` is set), a line per row, then the totals of the model's trainable and
/// non-trainable parameters (its variables', a shared layer's counted once).
std::string summary_table(const Model& model, const std::vector<SummaryRow>& rows, bool connected);

}  // namespace lockstep::detail
