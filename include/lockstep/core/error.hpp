#pragma once
// Typed errors. A library never exits on a user's mistake: it throws one of these,
// and the message names the operation and the offending values.
#include <sstream>
#include <stdexcept>
#include <string>

namespace lockstep {

/// Base of every error lockstep throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A shape, dtype or argument value that the operation cannot accept.
class ValueError : public Error {
 public:
  using Error::Error;
};
/// A file that is missing, unreadable, truncated or malformed.
class IOError : public Error {
 public:
  using Error::Error;
};
/// A broken internal invariant (a bug in lockstep, not in the caller's code).
class InternalError : public Error {
 public:
  using Error::Error;
};
/// The machine ran out of something a valid request needs: memory, threads.
class ResourceError : public Error {
 public:
  using Error::Error;
};
/// A peer or replica that failed, or a collective that timed out.
class DistributedError : public Error {
 public:
  using Error::Error;
};
/// An operation the object does not allow in its state, where Keras raises Python's TypeError
/// (setting the learning rate of an optimizer made with a schedule).
class TypeError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace lockstep

/// Checks a condition on user input; throws ErrType with the streamed message otherwise.
#define LOCKSTEP_CHECK_T(ErrType, cond, ...)                                   \
  do {                                                                         \
    if (!(cond)) [[unlikely]] {                                                \
      throw ErrType(::lockstep::detail::concat(__VA_ARGS__));                  \
    }                                                                          \
  } while (0)
#define LOCKSTEP_CHECK(cond, ...) LOCKSTEP_CHECK_T(::lockstep::ValueError, cond, __VA_ARGS__)
/// An invariant of lockstep itself.
#define LOCKSTEP_ASSERT(cond)                                                  \
  LOCKSTEP_CHECK_T(::lockstep::InternalError, cond, "internal invariant failed: ", #cond, \
                   " at ", __FILE__, ":", __LINE__)
