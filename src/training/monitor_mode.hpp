#pragma once
// Keras' rule for which direction of a monitored quantity is better.
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::detail {

/// True when larger is better. mode "auto": accuracy-like names ("acc" inside, or "fmeasure*").
inline bool monitor_greater_is_better(const std::string& mode, const std::string& monitor, const char* who) {
  LOCKSTEP_CHECK(mode == "auto" || mode == "min" || mode == "max", who, ": mode must be auto, min or max, got '",
                 mode, "'");
  if (mode == "auto") return monitor.find("acc") != std::string::npos || monitor.rfind("fmeasure", 0) == 0;
  return mode == "max";
}

}  // namespace lockstep::detail
