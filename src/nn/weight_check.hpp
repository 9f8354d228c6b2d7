#pragma once
// A hook for loaders of saved models: while a WeightCheck is alive on a thread, every
// Layer::add_weight on that thread first calls its function with the layer, the weight's index
// among the layer's variables and its shape, before the weight is allocated. A Keras file's
// config can ask for any size (units: 600000 is 1.9 GB of kernel); comparing with the weights
// file first turns that into an error naming the layer and both shapes instead of an allocation.
#include <cstddef>
#include <functional>

#include "lockstep/core/shape.hpp"

namespace lockstep::layers {
class Layer;
}

namespace lockstep::layers::detail {

using WeightCheckFn = std::function<void(const Layer& layer, std::size_t index, const Shape& shape)>;

class WeightCheck {
 public:
  explicit WeightCheck(WeightCheckFn fn);
  ~WeightCheck();
  WeightCheck(const WeightCheck&) = delete;
  WeightCheck& operator=(const WeightCheck&) = delete;

  /// Calls the innermost live check of this thread, if any.
  static void run(const Layer& layer, std::size_t index, const Shape& shape);

 private:
  WeightCheckFn fn_;
  WeightCheck* outer_;
};

}  // namespace lockstep::layers::detail
