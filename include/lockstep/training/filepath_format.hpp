#pragma once
// Python's str.format for checkpoint file names, as Keras' ModelCheckpoint uses it:
// "ckpt-{epoch:02d}-{val_loss:.2f}" with the epoch (1-based) and the logs.
#include <map>
#include <string>

#include "lockstep/training/callback.hpp"

namespace lockstep {

/// Replaces each {name} / {name:spec} with the named value. `ints` hold integer fields (epoch,
/// batch), `logs` floating ones. spec is Python's format mini-language for numbers:
/// [[fill]align][sign][0][width][,][.precision][type], type one of d f F e E g G % or none
/// ('d' only for integer fields, as Python). "{{" and "}}" are literal braces. A name in
/// neither map -> ValueError naming it, the template, and the available keys.
std::string format_filepath(const std::string& templ, const std::map<std::string, std::int64_t>& ints,
                            const Logs& logs);

/// Python's repr of a float (shortest round-trip: 0.1, 1e-05, 2.0, nan, inf), as Keras writes logs.
std::string float_repr(double v);

}  // namespace lockstep
