#include "training/compile_config.hpp"

namespace lockstep::detail {

namespace {
using nlohmann::json;
}  // namespace

losses::LossPtr loss_from_json(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const losses::CrossentropyOptions o{.from_logits = j.at("config").value("from_logits", false)};
  if (cls == "sparse_categorical_crossentropy") return losses::SparseCategoricalCrossentropy(o);
  if (cls == "categorical_crossentropy") return losses::CategoricalCrossentropy(o);
  if (cls == "binary_crossentropy") return losses::BinaryCrossentropy(o);
  if (cls == "mean_squared_error") return losses::MeanSquaredError();
  if (cls == "mean_absolute_error") return losses::MeanAbsoluteError();
  throw IOError("unknown loss class_name '" + cls +
                "' (lockstep knows sparse_categorical_crossentropy, categorical_crossentropy, binary_crossentropy, "
                "mean_squared_error, mean_absolute_error)");
}

}  // namespace lockstep::detail
