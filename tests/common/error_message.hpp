#pragma once
// The message of the ValueError (or IOError) a callable throws (a test failure when it throws none).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::test {

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ValueError";
  return "";
}

/// The message of the IOError a callable throws (a test failure when it throws none or another).
inline std::string io_message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IOError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected IOError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected IOError";
  return "";
}

}  // namespace lockstep::test

// A test failure unless `stmt` throws a ValueError whose message holds `text`.
#define EXPECT_VALUE_ERROR(stmt, text)                                                          \
  do {                                                                                          \
    const std::string m_ = ::lockstep::test::message_of([&] { (void)(stmt); });                 \
    EXPECT_NE(m_.find(text), std::string::npos) << "message: " << m_ << "\nexpected: " << text; \
  } while (0)
