#include "training/summary_table.hpp"

namespace lockstep::detail {

namespace {
std::string with_commas(std::int64_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') s += ',';
    s += digits[i];
  }
  return s;
}

std::string pad(std::string s, std::size_t width) {
  s.append(s.size() < width ? width - s.size() : 1, ' ');  // a long name still leaves a space
  return s;
}
}  // namespace

std::string summary_table(const Model& model, const std::vector<SummaryRow>& rows, bool connected) {
  const std::size_t width = connected ? 98 : 65;
  const std::string rule(width, '_'), thick(width, '=');
  std::string s = "Model: \"" + model.name() + "\"\n" + rule + "\n";
  s += pad(" Layer (type)", 29) + pad("Output Shape", 26) + (connected ? pad("Param #", 12) + "Connected to" : "Param #") +
       "\n" + thick + "\n";
  for (const auto& row : rows) {
    const auto& l = *row.layer;
    std::string shape = row.output_shape.str();
    if (!row.more_shapes.empty()) {  // Keras' list of the call's shapes
      shape = "[" + shape;
      for (const auto& more : row.more_shapes) shape += ", " + more.str();
      shape += "]";
    }
    std::string line = pad(" " + l.name() + " (" + l.class_name() + ")", 29) + pad(shape, 26);
    if (!connected) {
      s += line + std::to_string(l.count_params()) + "\n";
    } else {
      line += pad(std::to_string(l.count_params()), 12);
      if (row.connected_to.empty()) s += line + "-\n";
      for (std::size_t i = 0; i < row.connected_to.size(); ++i)
        s += (i == 0 ? line : std::string(29 + 26 + 12, ' ')) + row.connected_to[i] + "\n";
    }
  }
  const std::int64_t total = model.count_params();
  std::int64_t trainable = 0;
  for (const auto& v : model.trainable_variables()) trainable += v.shape().numel();
  s += thick + "\n";
  s += "Total params: " + with_commas(total) + "\n";
  s += "Trainable params: " + with_commas(trainable) + "\n";
  s += "Non-trainable params: " + with_commas(total - trainable) + "\n" + rule + "\n";
  return s;
}

}  // namespace lockstep::detail
