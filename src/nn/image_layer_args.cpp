#include "nn/image_layer_args.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lockstep/core/error.hpp"

namespace lockstep::layers {

using nlohmann::json;

void check_images(const Layer& layer, const Shape& s) {
  LOCKSTEP_CHECK(s.rank() == 4, "layer '", layer.name(), "' (", layer.class_name(),
                 ") needs batched images (batch, height, width, channels), channels_last, got ", s.str());
}

std::string floats_str(const std::vector<float>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::ostringstream o;
    o << v[i];
    s += (i ? ", " : "") + o.str();
  }
  return s + ")";
}

std::vector<float> factor_from_json(const json& j, const char* cls, const char* arg) {
  const auto refuse = [&] {
    return detail::concat(cls, ": `", arg, "` must be a number or a list of two numbers, got ",
                          j.dump().substr(0, 200));
  };
  if (j.is_number()) return {j.get<float>()};
  LOCKSTEP_CHECK(j.is_array(), refuse());
  std::vector<float> f;
  for (const json& v : j) {
    LOCKSTEP_CHECK(v.is_number(), refuse());
    f.push_back(v.get<float>());
  }
  return f;
}

std::pair<float, float> keras_factor(const char* cls, const std::vector<float>& f, float lo, float hi) {
  const auto message = [&] {
    std::ostringstream o;
    o << cls << ": the `factor` argument should be a number (or a list of two numbers) in the range [" << lo << ", "
      << hi << "]. Received: factor=";
    if (f.size() == 1)
      o << f[0];
    else
      o << floats_str(f);
    return o.str();
  };
  if (f.size() == 2) {
    LOCKSTEP_CHECK(!(f[0] > hi || f[1] < lo), message());
    return {std::min(f[0], f[1]), std::max(f[0], f[1])};
  }
  LOCKSTEP_CHECK(f.size() == 1 && f[0] >= lo && f[0] <= hi, message());
  const float a = std::fabs(f[0]);
  return {std::max(-a, lo), a};
}

}  // namespace lockstep::layers
