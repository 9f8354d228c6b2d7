#pragma once
// Beside error.hpp's errors (in a header of its own, included only where it is thrown or
// translated): Python's TypeError, where Keras raises one.
#include "lockstep/core/error.hpp"

namespace lockstep {

/// An operation the object does not allow in its state, where Keras raises Python's TypeError
/// (setting the learning rate of an optimizer made with a schedule).
class TypeError : public Error {
 public:
  using Error::Error;
};

}  // namespace lockstep
