#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lockstep {

/// Dimensions of a row-major tensor. A rank-0 shape is a scalar (numel 1).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  std::size_t rank() const { return dims_.size(); }
  /// Dimension i; negative i counts from the back. Throws ValueError when out of range.
  std::int64_t operator[](int i) const;
  std::int64_t numel() const;
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::vector<std::int64_t>& dims() { return dims_; }
  /// The shape without its first dimension.
  Shape tail() const;
  /// `(64, 784)`, as Keras prints shapes; -1 prints as None.
  std::string str() const;

  bool operator==(const Shape& o) const = default;

 private:
  std::vector<std::int64_t> dims_;
};

}  // namespace lockstep
