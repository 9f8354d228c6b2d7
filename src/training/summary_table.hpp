#pragma once
// The text of Keras' model.summary(), for every model class.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/layers/layer.hpp"

namespace lockstep::detail {

struct SummaryRow {
  const layers::Layer* layer;
  Shape output_shape;
  /// Functional models: the layers whose outputs this one takes ("conv2d[0][0]"), one per line.
  std::vector<std::string> connected_to;
};

/// Keras' table: "Layer (type)", "Output Shape", "Param #" (and "Connected to" when
/// `connected` is set), then the totals of trainable and non-trainable parameters.
std::string summary_table(const std::string& model_name, const std::vector<SummaryRow>& rows, bool connected);

}  // namespace lockstep::detail
