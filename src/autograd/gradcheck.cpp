#include "lockstep/autograd/gradcheck.hpp"

#include <cmath>
#include <random>
#include <sstream>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {

namespace {
// In double on the host: the finite difference of a float32 sum would drown in rounding.
double weighted_sum(const Tensor& out, const std::vector<float>& w) {
  const std::vector<float> o = out.to_vector<float>();
  double s = 0;
  for (std::size_t i = 0; i < o.size(); ++i) s += static_cast<double>(o[i]) * w[i];
  return s;
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs_in, const GradcheckOptions& opt) {
  std::vector<Tensor> inputs;
  for (const Tensor& t : inputs_in) {
    LOCKSTEP_CHECK(t.defined() && t.dtype() == DType::kF32, "gradcheck: every input must be float32");
    inputs.push_back(t.clone());
  }
  std::vector<float> w;
  std::vector<std::vector<float>> analytic;
  {
    GradientTape tape;
    for (const Tensor& t : inputs) tape.watch(t);
    Tensor out = f(inputs);
    LOCKSTEP_CHECK(out.defined() && out.dtype() == DType::kF32, "gradcheck: f must return a float32 tensor");
    std::mt19937_64 rng(opt.seed);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    w.resize(static_cast<std::size_t>(out.numel()));
    for (auto& v : w) v = u(rng);
    for (const Tensor& g : tape.gradient(out, inputs, Tensor::from_vector(w, out.shape())))
      analytic.push_back(g.defined() ? g.to_vector<float>() : std::vector<float>());
  }
  GradcheckResult res;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    // Each element is perturbed through a host copy written back into the input tensor.
    std::vector<float> p = x.to_vector<float>();
    for (std::int64_t i = 0, count = x.numel(); i < count; ++i) {
      const float orig = p[static_cast<std::size_t>(i)];
      const auto set = [&](float v) { x.copy_from_host(&v, sizeof v, static_cast<std::size_t>(i) * sizeof v); };
      set(orig + static_cast<float>(opt.eps));
      const double hi = weighted_sum(f(inputs), w);
      set(orig - static_cast<float>(opt.eps));
      const double lo = weighted_sum(f(inputs), w);
      set(orig);
      const double actual_eps = (static_cast<double>(orig + static_cast<float>(opt.eps)) -
                                 static_cast<double>(orig - static_cast<float>(opt.eps))) / 2.0;
      const double numeric = (hi - lo) / (2.0 * actual_eps);
      const double a = analytic[k].empty() ? 0.0 : analytic[k][static_cast<std::size_t>(i)];
      const double err = std::fabs(a - numeric);
      const double rel = err / std::max(std::fabs(numeric), 1e-12);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (err > opt.atol) res.max_rel_error = std::max(res.max_rel_error, rel);
      if (err > opt.atol + opt.rtol * std::fabs(numeric) && res.ok) {
        res.ok = false;
        std::ostringstream os;
        os << "input " << k << " " << x.shape().str() << " element " << i << ": analytic " << a << " vs numeric "
           << numeric;
        res.message = os.str();
      }
    }
  }
  return res;
}

}  // namespace lockstep
