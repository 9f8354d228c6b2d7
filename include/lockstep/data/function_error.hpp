#pragma once
// The error a pipeline raises when a user function (map, filter, interleave, a generator)
// throws: it says which transformation and which element, and keeps the original exception.
#include <cstdint>
#include <exception>
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::data {

/// Thrown by Iterator::next() in place of the exception a user function threw.
/// what(): "Dataset::map: the function threw on element 17 (0-based, of this pass of map's
/// input): <original what()>". nested() (std::nested_exception) rethrows the original, so a
/// caller can still catch its own exception type with std::rethrow_if_nested.
class FunctionError : public Error, public std::nested_exception {
 public:
  /// Call inside the catch block: std::nested_exception captures the exception in flight.
  FunctionError(const std::string& transformation, std::int64_t element_index, const std::string& original_message);

  const std::string& transformation() const { return transformation_; }
  std::int64_t element_index() const { return element_index_; }
  const std::string& original_message() const { return original_message_; }

 private:
  std::string transformation_;
  std::int64_t element_index_;
  std::string original_message_;
};

}  // namespace lockstep::data
