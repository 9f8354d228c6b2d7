#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "lockstep/core/error.hpp"

// A fresh directory per test under the build tree, removed afterwards.
inline std::string fresh_dir(const std::string& name) {
  const auto d = std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "io" / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Expects `f` to throw IOError whose message contains every one of `needles`.
template <typename F>
void expect_io_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no IOError thrown";
  } catch (const lockstep::IOError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message: " << e.what() << "\nmissing: " << n;
  }
}
