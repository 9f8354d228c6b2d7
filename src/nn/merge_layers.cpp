#include "lockstep/layers/merge_layers.hpp"

#include <limits>
#include <nlohmann/json.hpp>
#include "nn/config_reader.hpp"

namespace lockstep::layers {

std::string MergeLayer::shapes_str(const std::vector<Shape>& shapes) {
  std::string s = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shapes[i].str();
  return s + "]";
}

void MergeLayer::check_list(const std::vector<Shape>& shapes) const {
  LOCKSTEP_CHECK(shapes.size() >= 2, "layer '", name(), "' (", class_name(),
                 ") should be called on a list of at least 2 inputs, got ", shapes.size());
}

void MergeLayer::build_merge(const std::vector<Shape>& shapes, std::uint64_t seed) {
  (void)merge_output_shape(shapes);
  build(shapes.front(), seed);
}

Shape MergeLayer::compute_output_shape(const Shape& s) const {
  throw ValueError("layer '" + name() + "' (" + class_name() + ") merges a list of tensors but is given one, of shape " +
                   s.str() + "; call it on a list in a functional model: lockstep::call(layer, {a, b})");
}

Tensor MergeLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());  // throws
  return {};
}

std::vector<Tensor> MergeLayer::call_outputs(const std::vector<Tensor>& inputs, const CallArguments&,
                                             const CallContext& ctx) const {
  return {merge(inputs, ctx)};
}

Shape MergeLayer::check_same_shapes(const std::vector<Shape>& shapes) const {
  check_list(shapes);
  for (const auto& s : shapes)
    LOCKSTEP_CHECK(s.tail() == shapes.front().tail() && s.rank() == shapes.front().rank(), "layer '", name(), "' (",
                   class_name(), ") needs inputs of one shape, got ", shapes_str(shapes));
  return shapes.front();
}

std::vector<Tensor> MergeLayer::checked_inputs(const std::vector<Tensor>& inputs) const {
  std::vector<Shape> shapes;
  for (const auto& x : inputs) shapes.push_back(x.shape());
  (void)merge_output_shape(shapes);
  std::vector<Tensor> out;
  for (const auto& x : inputs) out.push_back(autocast(x));
  return out;
}

namespace {
// Masks (uint8, nonzero where a step counts) combined step by step: all of them keep it, or any.
Tensor combine_masks(const std::vector<Tensor>& masks, bool any) {
  Tensor acc;
  for (const Tensor& m : masks) {
    if (!m.defined()) continue;
    const Tensor f = cast(not_equal(m, Tensor::zeros(Shape{}, m.dtype())), DType::kF32);
    acc = !acc.defined() ? f : any ? add(acc, f) : mul(acc, f);
  }
  return acc.defined() ? not_equal(acc, Tensor::zeros(Shape{}, DType::kF32)) : Tensor();
}
}  // namespace

Tensor MergeLayer::merge_mask(const std::vector<Tensor>&, const std::vector<Tensor>& masks) const {
  // Keras 3's Merge.compute_mask (merging/base_merge.py): no mask where an input has none, else
  // the steps any input keeps.
  for (const Tensor& m : masks)
    if (!m.defined()) return Tensor();
  return combine_masks(masks, true);
}

Shape AddLayer::merge_output_shape(const std::vector<Shape>& shapes) const { return check_same_shapes(shapes); }

Tensor AddLayer::merge(const std::vector<Tensor>& inputs, const CallContext&) const {
  const std::vector<Tensor> xs = checked_inputs(inputs);
  // Left to right, as Keras' Add: the same rounding on every replica and every run.
  Tensor y = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) y = add(y, xs[i]);
  return y;
}

LayerPtr AddLayer::from_config(const nlohmann::json& c) {
  return std::make_shared<AddLayer>(layer_config_reader("Add", c).string("name"));
}

LayerPtr Add() { return std::make_shared<AddLayer>(); }

// ---- Multiply, Subtract, Average, Maximum, Minimum ----
std::string ElementwiseMergeLayer::class_name() const {
  switch (kind_) {
    case Kind::kMultiply: return "Multiply";
    case Kind::kSubtract: return "Subtract";
    case Kind::kAverage: return "Average";
    case Kind::kMaximum: return "Maximum";
    case Kind::kMinimum: return "Minimum";
  }
  return "Multiply";
}

Shape ElementwiseMergeLayer::merge_output_shape(const std::vector<Shape>& shapes) const {
  LOCKSTEP_CHECK(kind_ != Kind::kSubtract || shapes.size() == 2, "layer '", name(),
                 "' (Subtract) should be called on a list of exactly 2 inputs, got ", shapes.size());
  return check_same_shapes(shapes);
}

Tensor ElementwiseMergeLayer::merge(const std::vector<Tensor>& inputs, const CallContext&) const {
  const std::vector<Tensor> xs = checked_inputs(inputs);
  Tensor y = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) {
    switch (kind_) {
      case Kind::kMultiply: y = mul(y, xs[i]); break;
      case Kind::kSubtract: y = sub(y, xs[i]); break;
      case Kind::kAverage: y = add(y, xs[i]); break;
      case Kind::kMaximum: y = maximum(y, xs[i]); break;
      case Kind::kMinimum: y = minimum(y, xs[i]); break;
    }
  }
  return kind_ == Kind::kAverage ? scale(y, 1.0f / static_cast<float>(xs.size())) : y;
}

LayerPtr ElementwiseMergeLayer::from_config(Kind kind, const nlohmann::json& c) {
  return std::make_shared<ElementwiseMergeLayer>(kind, layer_config_reader("merge layer", c).string("name"));
}

LayerPtr Multiply() { return std::make_shared<ElementwiseMergeLayer>(ElementwiseMergeLayer::Kind::kMultiply); }
LayerPtr Subtract() { return std::make_shared<ElementwiseMergeLayer>(ElementwiseMergeLayer::Kind::kSubtract); }
LayerPtr Average() { return std::make_shared<ElementwiseMergeLayer>(ElementwiseMergeLayer::Kind::kAverage); }
LayerPtr Maximum() { return std::make_shared<ElementwiseMergeLayer>(ElementwiseMergeLayer::Kind::kMaximum); }
LayerPtr Minimum() { return std::make_shared<ElementwiseMergeLayer>(ElementwiseMergeLayer::Kind::kMinimum); }

// ---- Concatenate ----
ConcatenateLayer::ConcatenateLayer(int axis, std::string name) : MergeLayer(std::move(name)), axis_(axis) {}

Shape ConcatenateLayer::merge_output_shape(const std::vector<Shape>& shapes) const {
  check_list(shapes);
  const int rank = static_cast<int>(shapes.front().rank());
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  LOCKSTEP_CHECK(axis >= 1 && axis < rank, "layer '", name(), "' (Concatenate): axis ", axis_,
                 " is not an axis after the batch of inputs ", shapes_str(shapes));
  std::vector<std::int64_t> dims = shapes.front().dims();
  dims[static_cast<std::size_t>(axis)] = 0;
  for (const auto& s : shapes) {
    bool same = static_cast<int>(s.rank()) == rank;
    for (int d = 1; same && d < rank; ++d) same = d == axis || s[d] == shapes.front()[d];
    LOCKSTEP_CHECK(same, "layer '", name(), "' (Concatenate) needs inputs that match except along axis ", axis_,
                   ", got ", shapes_str(shapes));
    dims[static_cast<std::size_t>(axis)] += s[axis];
  }
  return Shape(std::move(dims));
}

Tensor ConcatenateLayer::merge(const std::vector<Tensor>& inputs, const CallContext&) const {
  return concatenate(checked_inputs(inputs), axis_);
}

Tensor ConcatenateLayer::merge_mask(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks) const {
  // Keras 3's Concatenate.compute_mask (merging/concatenate.py): none where no input has one; else
  // each input's mask broadcast over its features (an unmasked input's all true), concatenated
  // along the axis, then any() over the last axis. Computed here without the broadcast: along
  // the features, the steps any input keeps (all of them where an input has no mask: a mask of
  // ones, not none); along another axis, the inputs' step masks concatenated.
  std::size_t masked = 0;
  for (const Tensor& m : masks) masked += m.defined() ? 1 : 0;
  if (masked == 0) return Tensor();
  const int rank = static_cast<int>(inputs.front().rank());
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  std::vector<Tensor> parts;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& d = inputs[i].shape().dims();
    const Shape steps(std::vector<std::int64_t>(d.begin(), d.end() - 1));
    LOCKSTEP_CHECK(!masks[i].defined() || masks[i].numel() == steps.numel(), "layer '", name(),
                   "' (Concatenate): a mask ", masks[i].shape().str(), " does not match the steps of input ",
                   inputs[i].shape().str());
    parts.push_back(masks[i].defined() ? combine_masks({masks[i].reshape(steps)}, false)
                                       : Tensor::ones(steps, DType::kU8));
  }
  return axis == rank - 1 ? combine_masks(parts, true) : concatenate(parts, axis);
}

nlohmann::json ConcatenateLayer::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["axis"] = axis_;
  return c;
}
LayerPtr ConcatenateLayer::from_config(const nlohmann::json& c) {
  auto r = layer_config_reader("Concatenate", c);
  return std::make_shared<ConcatenateLayer>(static_cast<int>(r.integer("axis", -1, -(1 << 20), 1 << 20)), r.string("name"));
}

LayerPtr Concatenate(int axis) { return std::make_shared<ConcatenateLayer>(axis); }

// ---- Dot ----
DotLayer::DotLayer(std::array<int, 2> axes, bool normalize, std::string name)
    : MergeLayer(std::move(name)), axes_(axes), normalize_(normalize) {}

std::array<int, 2> DotLayer::axes_for(std::size_t rank) const {
  std::array<int, 2> a{};
  for (std::size_t i = 0; i < 2; ++i) {
    a[i] = axes_[i] < 0 ? axes_[i] + static_cast<int>(rank) : axes_[i];
    LOCKSTEP_CHECK(a[i] >= 1 && a[i] < static_cast<int>(rank), "layer '", name(), "' (Dot): axis ", axes_[i],
                   " is not an axis after the batch of a rank-", rank, " input");
  }
  return a;
}

Shape DotLayer::merge_output_shape(const std::vector<Shape>& shapes) const {
  LOCKSTEP_CHECK(shapes.size() == 2, "layer '", name(), "' (Dot) should be called on a list of exactly 2 inputs, got ",
                 shapes.size());
  const Shape& a = shapes[0];
  const Shape& b = shapes[1];
  LOCKSTEP_CHECK(a.rank() == b.rank() && (a.rank() == 2 || a.rank() == 3), "layer '", name(),
                 "' (Dot) needs two inputs of rank 2 or of rank 3, got ", shapes_str(shapes));
  const auto ax = axes_for(a.rank());
  LOCKSTEP_CHECK(a[ax[0]] == b[ax[1]], "layer '", name(), "' (Dot): axis ", ax[0], " of ", a.str(), " and axis ",
                 ax[1], " of ", b.str(), " differ in size");
  if (a.rank() == 2) return Shape{a[0], 1};
  return Shape{a[0], a[3 - ax[0]], b[3 - ax[1]]};
}

Tensor DotLayer::merge(const std::vector<Tensor>& inputs, const CallContext&) const {
  std::vector<Tensor> xs = checked_inputs(inputs);
  const auto ax = axes_for(xs[0].rank());
  if (normalize_) {
    // Keras' l2_normalize: x / sqrt(max(sum(x^2), 1e-12)) along the dot's axis.
    for (std::size_t i = 0; i < 2; ++i) {
      const Tensor ss = sum(square(xs[i]), ax[i], true);
      xs[i] = mul(xs[i], pow_scalar(clip(ss, 1e-12f, std::numeric_limits<float>::max()), -0.5f));
    }
  }
  const Shape out = merge_output_shape({xs[0].shape(), xs[1].shape()});
  if (xs[0].rank() == 2) {
    const std::int64_t n = xs[0].dim(0), d = xs[0].dim(1);
    return reshape(batch_matmul(reshape(xs[0], {n, 1, d}), reshape(xs[1], {n, d, 1})), out);
  }
  // [b, m, k] @ [b, k, n] with the contracted axes moved by the products' transposes.
  return batch_matmul(xs[0], xs[1], ax[0] == 1, ax[1] == 2);
}

nlohmann::json DotLayer::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["axes"] = axes_[0] == axes_[1] ? nlohmann::json(axes_[0]) : nlohmann::json(axes_);
  c["normalize"] = normalize_;
  return c;
}
LayerPtr DotLayer::from_config(const nlohmann::json& c) {
  auto r = layer_config_reader("Dot", c);
  constexpr std::int64_t kAxis = 1 << 20;  // past any rank: the layer checks the axes
  std::array<int, 2> axes{};
  if (r.value("axes").is_array()) {
    const std::vector<std::int64_t> both = r.integers("axes", -kAxis, kAxis);
    if (both.size() != 2) r.fail("axes", r.value("axes"), "must be one integer or a list of two");
    axes = {static_cast<int>(both[0]), static_cast<int>(both[1])};
  } else {
    const int one = static_cast<int>(r.integer_in("axes", -kAxis, kAxis));
    axes = {one, one};
  }
  return std::make_shared<DotLayer>(axes, r.boolean("normalize", false), r.string("name"));
}

LayerPtr Dot(int axes, bool normalize) { return std::make_shared<DotLayer>(std::array<int, 2>{axes, axes}, normalize); }
LayerPtr Dot(std::array<int, 2> axes, bool normalize) { return std::make_shared<DotLayer>(axes, normalize); }

}  // namespace lockstep::layers
