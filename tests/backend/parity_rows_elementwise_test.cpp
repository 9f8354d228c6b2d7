// Parity rows: broadcasting binary ops, unary ops and their gradients (unary_grad).
#include <algorithm>
#include <cmath>
#include <iterator>

#include "backend/parity.hpp"

namespace lockstep::parity {

namespace {
using backend::KernelOp;

// Shapes: equal; broadcast on both sides; a row vector over an odd 263 x 257 (past the
// 2 * 32768 grain, so the odometer starts mid-tensor in each chunk); a column over it; an outer
// product (each input repeats along one axis); channels over NHWC (the collapse to rows x
// channels: BatchNorm's and a bias's shape); empty with broadcasting.
struct BinaryCase {
  const char* variant;
  Shape a, b;
};
const BinaryCase kBinaryCases[] = {
    {"same", {7, 5}, {7, 5}},
    {"bcast", {4, 1, 3}, {5, 1}},
    {"row_grain", {263, 257}, {257}},
    {"column_grain", {263, 257}, {263, 1}},
    {"outer_grain", {263, 1}, {1, 257}},
    {"channels_grain", {5, 29, 31, 16}, {16}},
    {"channels_a", {16}, {3, 5, 7, 16}},
    {"empty", {0, 3}, {3}},
};
// Only for add: each of the kernel's fast paths, past the grain.
const BinaryCase kAddCases[] = {
    {"contig_grain", {65539}, {65539}},
    {"scalar_b_grain", {67, 1001}, {}},
    {"scalar_a", {}, {9}},
    {"scalars", {}, {}},
    {"empty_both", {0}, {0}},
};

using Binary = Tensor (*)(const Tensor&, const Tensor&);
using Ref2 = double (*)(double, double);

Row binary_row(const char* key, Binary f, Ref2 ref, Gen gb, Match m, const BinaryCase& c, Gen ga = uniform(-2, 2)) {
  return make_row(
      key, c.variant, key, floats(), {{KernelOp::kBinary, {}}}, {{c.a, ga, {}}, {c.b, gb, {}}},
      [f](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{f(in[0], in[1])}; },
      [ref](const std::vector<Host>& in, DType) {
        Expected e(broadcast(in[0].shape, in[1].shape));
        for (std::int64_t i = 0; i < e.numel(); ++i)
          e.set(i, ref(in[0][broadcast_index(e.shape, in[0].shape, i)], in[1][broadcast_index(e.shape, in[1].shape, i)]));
        return std::vector<Expected>{e};
      },
      m);
}

struct UnaryCase {
  const char* key;
  std::function<Tensor(const Tensor&)> f;
  std::function<double(double)> ref;
  Gen gen;
  Match match;
  std::function<double(double)> acc;  // float32 cancellation inside, relative to this
};

std::vector<UnaryCase> unary_cases() {
  auto none = [](double) { return 0.0; };
  auto phi = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, uniform(-2, 2), Match::kExact, none},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, uniform(-4, 4),
       Match::kRounded, none},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, uniform(0.05, 8),
       Match::kRounded, none},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, uniform(0, 9),
       Match::kRounded, none},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, uniform(-3, 3),
       Match::kRounded, none},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, uniform(-2, 2),
       Match::kExact, none},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return std::isnan(x) || x > 0 ? x : 0.0; },
       uniform(-2, 2), Match::kExact, none},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); },
       uniform(-8, 8), Match::kRounded, none},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, uniform(-4, 4),
       Match::kRounded, none},
      // 1 + erf(x) cancels for negative x: float32's error is relative to |x|.
      {"gelu", [](const Tensor& x) { return gelu(x); }, [phi](double x) { return x * phi(x); }, uniform(-5, 5),
       Match::kRounded, [](double x) { return std::fabs(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, true); },
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); },
       uniform(-5, 5), Match::kRounded, [](double x) { return std::fabs(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); },
       uniform(-8, 8), Match::kRounded, [](double x) { return std::fabs(x); }},
      {"scale", [](const Tensor& x) { return scale(x, -2.5f); }, [](double x) { return x * -2.5; }, uniform(-2, 2),
       Match::kRounded, none},
      {"add_scalar", [](const Tensor& x) { return add_scalar(x, 0.75f); }, [](double x) { return x + 0.75; },
       uniform(-2, 2), Match::kRounded, none},
      {"pow_scalar", [](const Tensor& x) { return pow_scalar(x, 3.0f); }, [](double x) { return x * x * x; },
       uniform(-2, 2), Match::kRounded, none},
      {"pow_scalar_half", [](const Tensor& x) { return pow_scalar(x, 0.5f); }, [](double x) { return std::sqrt(x); },
       uniform(0, 4), Match::kRounded, none},
      {"clip", [](const Tensor& x) { return clip(x, -0.5f, 0.75f); },
       [](double x) { return std::min(std::max(x, -0.5), 0.75); }, uniform(-1.5, 1.5), Match::kExact, none},
  };
}

std::string fn_of(const std::string& key) {
  if (key == "gelu_tanh") return "gelu";
  return key == "pow_scalar_half" ? "pow_scalar" : key;
}

Row unary_row(const UnaryCase& u, const char* variant, const Shape& shape) {
  return make_row(
      u.key, variant, fn_of(u.key), floats(), {{KernelOp::kUnary, {}}}, {{shape, u.gen, {}}},
      [f = u.f](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{f(in[0])}; },
      [ref = u.ref, acc = u.acc](const std::vector<Host>& in, DType) {
        Expected e(in[0].shape);
        for (std::int64_t i = 0; i < e.numel(); ++i) e.set(i, ref(in[0][i]), acc(in[0][i]));
        return std::vector<Expected>{e};
      },
      u.match);
}

// dx = dy * op'(x), the kernel given x, y = op(x) (generated independently: the formula only
// reads them) and dy. acc: float32 cancellation inside the formula.
struct GradCase {
  OpType op;
  Gen x, y;
  float p0, p1;
  std::function<double(double x, double y, double g)> ref;
  std::function<double(double x, double y, double g)> acc;
  const char* suffix = "";  // tells rows of one op apart (gelu's two forms)
};

std::vector<GradCase> grad_cases() {
  auto none = [](double, double, double) { return 0.0; };
  auto pdf = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  const Gen any = uniform(-2, 2);
  return {
      {OpType::kNeg, any, any, 0, 0, [](double, double, double g) { return -g; }, none},
      {OpType::kExp, any, uniform(0.01, 50), 0, 0, [](double, double y, double g) { return g * y; }, none},
      {OpType::kLog, uniform(0.1, 4), any, 0, 0, [](double x, double, double g) { return g / x; }, none},
      {OpType::kSqrt, any, uniform(0.1, 3), 0, 0, [](double, double y, double g) { return g * 0.5 / y; }, none},
      {OpType::kSquare, any, any, 0, 0, [](double x, double, double g) { return g * 2 * x; }, none},
      {OpType::kAbs, away_from_zero(-2, 2, 0.01), any, 0, 0,
       [](double x, double, double g) { return x > 0 ? g : x < 0 ? -g : 0.0; }, none},
      {OpType::kRelu, any, any, 0, 0, [](double x, double, double g) { return x > 0 ? g : 0.0; }, none},
      {OpType::kSigmoid, any, uniform(0, 1), 0, 0, [](double, double y, double g) { return g * y * (1 - y); }, none},
      {OpType::kTanh, any, uniform(-1, 1), 0, 0, [](double, double y, double g) { return g * (1 - y * y); },
       [](double, double y, double g) { return std::fabs(g) * y * y; }},
      {OpType::kGelu, uniform(-4, 4), any, 0, 0,
       [=](double x, double, double g) { return g * (cdf(x) + x * pdf(x)); },
       [](double x, double, double g) { return std::fabs(g) * (1 + std::fabs(x)); }},
      {OpType::kGelu, uniform(-4, 4), any, 1, 0,
       [](double x, double, double g) {
         const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
         return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x));
       },
       [](double x, double, double g) { return std::fabs(g) * (1 + x * x); }, "_tanh"},
      {OpType::kSilu, uniform(-6, 6), any, 0, 0,
       [](double x, double, double g) {
         const double s = 1 / (1 + std::exp(-x));
         return g * s * (1 + x * (1 - s));
       },
       [](double x, double, double g) { return std::fabs(g) * (1 + std::fabs(x)); }},
      {OpType::kScale, any, any, -2.5f, 0, [](double, double, double g) { return g * -2.5; }, none},
      {OpType::kAddScalar, any, any, 0.75f, 0, [](double, double, double g) { return g; }, none},
      {OpType::kPowScalar, any, any, 3.0f, 0, [](double x, double, double g) { return g * 3 * x * x; }, none},
      {OpType::kClip, uniform(-1.5, 1.5), any, -0.5f, 0.75f,
       [](double x, double, double g) { return x < -0.5 || x > 0.75 ? 0.0 : g; }, none},
      // NaN and +-inf: relu's gradient at a NaN is 0 (TensorFlow's g * (x > 0)), clip's passes
      // g (TensorFlow's: only a value outside [lo, hi] stops it).
      {OpType::kRelu, specials(), any, 0, 0, [](double x, double, double g) { return x > 0 ? g : 0.0; }, none,
       "_nonfinite"},
      {OpType::kClip, specials(), any, -0.5f, 0.75f,
       [](double x, double, double g) { return x < -0.5 || x > 0.75 ? 0.0 : g; }, none, "_nonfinite"},
  };
}

// The activations at NaN, +-inf and +-0 on every backend: TensorFlow's rule, a NaN in gives a
// NaN out (relu, clip, maximum and minimum included, where `x > 0 ? x : 0` or fmaxf would give
// 0), and each function's own limits at +-inf (sigmoid 0 and 1, tanh -1 and 1). gelu and silu
// at -inf are -inf * 0: NaN, as TensorFlow's formulas give too.
const char* const kActivations[] = {"relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "clip"};

Row grad_row(const GradCase& c) {
  const Shape s{263, 257};  // past the grain
  Row r = make_row(
      std::string("unary_grad_") + op_name(c.op) + c.suffix, "grain", "unary_grad", floats(),
      {{KernelOp::kUnaryBackward, {}}}, {{s, c.x, {}}, {s, c.y, {}}, {s, uniform(-1, 1), {}}},
      [c](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{unary_grad(c.op, in[0], in[1], in[2], c.p0, c.p1)};
      },
      [c](const std::vector<Host>& in, DType) {
        Expected e(in[0].shape);
        for (std::int64_t i = 0; i < e.numel(); ++i)
          e.set(i, c.ref(in[0][i], in[1][i], in[2][i]), c.acc(in[0][i], in[1][i], in[2][i]));
        return std::vector<Expected>{e};
      });
  r.op = op_name(c.op);  // a missing backward kernel names the forward op
  return r;
}
}  // namespace

std::vector<Row> elementwise_rows() {
  std::vector<Row> rows;
  struct B {
    const char* key;
    Binary f;
    Ref2 ref;
    Gen gb;
    Match m;
  };
  const B binaries[] = {
      {"add", add, [](double a, double b) { return a + b; }, uniform(-2, 2), Match::kRounded},
      {"sub", sub, [](double a, double b) { return a - b; }, uniform(-2, 2), Match::kRounded},
      {"mul", mul, [](double a, double b) { return a * b; }, uniform(-2, 2), Match::kRounded},
      {"div", div, [](double a, double b) { return a / b; }, away_from_zero(-2, 2, 0.5), Match::kRounded},
      {"maximum", maximum, [](double a, double b) { return std::isnan(a) || a > b ? a : b; }, uniform(-2, 2),
       Match::kExact},
      {"minimum", minimum, [](double a, double b) { return std::isnan(a) || a < b ? a : b; }, uniform(-2, 2),
       Match::kExact},
  };
  for (const B& b : binaries)
    for (const BinaryCase& c : kBinaryCases) rows.push_back(binary_row(b.key, b.f, b.ref, b.gb, b.m, c));
  for (const BinaryCase& c : kAddCases) rows.push_back(binary_row("add", add, binaries[0].ref, uniform(-2, 2), Match::kRounded, c));

  for (const UnaryCase& u : unary_cases()) {
    rows.push_back(unary_row(u, "odd", {2, 3, 5}));
    rows.push_back(unary_row(u, "grain", {65539}));
  }
  for (UnaryCase u : unary_cases()) {
    if (std::find(std::begin(kActivations), std::end(kActivations), std::string(u.key)) == std::end(kActivations))
      continue;
    u.gen = specials();
    rows.push_back(unary_row(u, "nonfinite", {4, 8}));
  }
  for (const B& b : binaries)
    if (b.key == std::string("maximum") || b.key == std::string("minimum"))
      // a's columns and b's rows are NaN, +-inf, +-0 and ordinary values: every pair of them.
      rows.push_back(binary_row(b.key, b.f, b.ref, specials(), b.m, {"nonfinite", {8, 8}, {8, 1}}, specials()));
  // where(cond, a, b): the condition uint8 (nonzero holds: 0, 1 and 2) broadcast with a and b;
  // "nonfinite": an infinity or NaN on the side not chosen never reaches the result.
  struct WhereCase {
    const char* variant;
    Shape cond, a, b;
    Gen values;
  };
  const WhereCase where_cases[] = {
      {"same", {4, 6}, {4, 6}, {4, 6}, uniform(-2, 2)},
      {"bcast", {3, 1, 5}, {4, 5}, {}, uniform(-2, 2)},
      {"mask_rows", {2, 1, 1, 7}, {2, 3, 4, 7}, {1}, uniform(-2, 2)},
      {"grain", {263, 257}, {257}, {263, 1}, uniform(-2, 2)},
      {"nonfinite", {8, 8}, {8, 8}, {8, 8}, specials()},
      {"empty", {0, 3}, {3}, {}, uniform(-2, 2)},
  };
  for (const WhereCase& c : where_cases)
    rows.push_back(make_row(
        "where", c.variant, "where", floats(), {{KernelOp::kWhere, {}}},
        {{c.cond, uniform(0, 2), DType::kU8}, {c.a, c.values, {}}, {c.b, c.values, {}}},
        [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{where(in[0], in[1], in[2])}; },
        [](const std::vector<Host>& in, DType) {
          Expected e(broadcast(in[0].shape, broadcast(in[1].shape, in[2].shape)));
          for (std::int64_t i = 0; i < e.numel(); ++i)
            e.set(i, in[0][broadcast_index(e.shape, in[0].shape, i)] != 0
                         ? in[1][broadcast_index(e.shape, in[1].shape, i)]
                         : in[2][broadcast_index(e.shape, in[2].shape, i)]);
          return std::vector<Expected>{e};
        },
        Match::kExact));
  rows.push_back(unary_row(unary_cases()[0], "empty", {0, 4}));
  rows.push_back(unary_row(unary_cases()[1], "scalar", {}));

  for (const GradCase& c : grad_cases()) rows.push_back(grad_row(c));
  return rows;
}

}  // namespace lockstep::parity
