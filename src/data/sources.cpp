// from_generator and range: sources that make their elements instead of slicing tensors.
#include "data/nodes.hpp"
#include "data/worker.hpp"

namespace lockstep::data::detail {

namespace {

class GeneratorIterator final : public Iterator {
 public:
  explicit GeneratorIterator(Generator gen) : gen_(std::move(gen)) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    std::optional<Element> e;
    try {
      e = gen_();
    } catch (...) {
      done_ = true;
      std::rethrow_exception(function_error("Dataset::from_generator", index_));
    }
    if (!e) {
      done_ = true;
      gen_ = nullptr;  // let go of what the generator holds
    }
    ++index_;
    return e;
  }

 private:
  Generator gen_;
  std::int64_t index_ = 0;
  bool done_ = false;
};

class GeneratorNode final : public DatasetNode {
 public:
  GeneratorNode(std::function<Generator()> make, std::int64_t cardinality)
      : make_(std::move(make)), cardinality_(cardinality) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    Generator gen;
    try {
      gen = make_();
    } catch (...) {
      std::rethrow_exception(function_error("Dataset::from_generator (making the generator)", 0));
    }
    LOCKSTEP_CHECK(gen != nullptr, "Dataset::from_generator: the factory returned an empty generator");
    return std::make_unique<GeneratorIterator>(std::move(gen));
  }
  std::int64_t cardinality() const override { return cardinality_; }
  std::string name() const override { return "from_generator"; }

 private:
  std::function<Generator()> make_;
  std::int64_t cardinality_;
};

class RangeIterator final : public Iterator {
 public:
  RangeIterator(std::int64_t start, std::int64_t count, std::int64_t step) : next_(start), left_(count), step_(step) {}
  std::optional<Element> next() override {
    if (left_ <= 0) return std::nullopt;
    --left_;
    Tensor t = Tensor::from_vector(std::vector<std::int64_t>{next_}, Shape{});
    next_ += left_ > 0 ? step_ : 0;  // never step past the last value: it could overflow
    return Element{std::move(t)};
  }

 private:
  std::int64_t next_, left_, step_;
};

class RangeNode final : public DatasetNode {
 public:
  RangeNode(std::int64_t start, std::int64_t stop, std::int64_t step) : start_(start), stop_(stop), step_(step) {
    // In unsigned arithmetic the span cannot overflow even for range(INT64_MIN, INT64_MAX).
    if (step > 0 && stop > start) {
      const auto span = static_cast<std::uint64_t>(stop) - static_cast<std::uint64_t>(start);
      count_ = static_cast<std::int64_t>((span - 1) / static_cast<std::uint64_t>(step) + 1);
    } else if (step < 0 && stop < start) {
      const auto span = static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(stop);
      count_ = static_cast<std::int64_t>((span - 1) / (0 - static_cast<std::uint64_t>(step)) + 1);
    }
  }
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<RangeIterator>(start_, count_, step_);
  }
  std::int64_t cardinality() const override { return count_; }
  std::string name() const override {
    return "range(" + std::to_string(start_) + ", " + std::to_string(stop_) + ", " + std::to_string(step_) + ")";
  }

 private:
  std::int64_t start_, stop_, step_;
  std::int64_t count_ = 0;
};

}  // namespace

NodePtr make_generator_node(std::function<Generator()> make_generator, std::int64_t cardinality) {
  LOCKSTEP_CHECK(make_generator != nullptr, "Dataset::from_generator: the generator factory is empty");
  LOCKSTEP_CHECK(cardinality >= kUnknownCardinality, "Dataset::from_generator: cardinality must be >= 0, ",
                 "kInfiniteCardinality or kUnknownCardinality; got ", cardinality);
  return std::make_shared<GeneratorNode>(std::move(make_generator), cardinality);
}

NodePtr make_range_node(std::int64_t start, std::int64_t stop, std::int64_t step) {
  LOCKSTEP_CHECK(step != 0, "Dataset::range: step must not be 0");
  return std::make_shared<RangeNode>(start, stop, step);
}

}  // namespace lockstep::data::detail
