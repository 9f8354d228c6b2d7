#pragma once
// What the saved-model and Keras-file tests share: deterministic data, bit-for-bit comparison of
// models' variables, a fresh folder per test and the IOError a failing load throws.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::test {

/// test_tmp/<group>/<name> under the build folder, removed; its parent exists.
inline std::string fresh_test_dir(const std::string& group, const std::string& name) {
  const auto d = std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / group / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d.parent_path());
  return d.string();
}

// Deterministic inputs in [0, 1) and labels in [0, classes).
inline Tensor inputs(std::int64_t n, std::int64_t features) {
  std::vector<float> v(static_cast<std::size_t>(n * features));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37 + 11) % 101) / 101.0f;
  return Tensor::from_vector(v, Shape{n, features});
}
inline Tensor labels(std::int64_t n, std::int64_t classes) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>((i * 7) % static_cast<std::size_t>(classes));
  return Tensor::from_vector(v, Shape{n});
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

inline void expect_same_variables(const Model& a, const Model& b) {
  const auto va = a.variables(), vb = b.variables();
  ASSERT_EQ(va.size(), vb.size());
  for (std::size_t i = 0; i < va.size(); ++i) {
    EXPECT_EQ(va[i].name(), vb[i].name());
    EXPECT_TRUE(same_bits(va[i].read_value(), vb[i].read_value())) << va[i].name();
  }
}

}  // namespace lockstep::test
