#include "lockstep/autograd/gradcheck.hpp"

#include <cmath>
#include <random>
#include <sstream>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {

namespace {
double weighted_sum(const Tensor& out, const Tensor& w) {
  const float* o = out.data<float>();
  const float* p = w.data<float>();
  double s = 0;
  for (std::int64_t i = 0, count = out.numel(); i < count; ++i) s += static_cast<double>(o[i]) * p[i];
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
  Tensor weights;
  std::vector<Tensor> analytic;
  {
    GradientTape tape;
    for (const Tensor& t : inputs) tape.watch(t);
    Tensor out = f(inputs);
    LOCKSTEP_CHECK(out.defined() && out.dtype() == DType::kF32, "gradcheck: f must return a float32 tensor");
    std::mt19937_64 rng(opt.seed);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    std::vector<float> w(static_cast<std::size_t>(out.numel()));
    for (auto& v : w) v = u(rng);
    weights = Tensor::from_vector(w, out.shape());
    analytic = tape.gradient(out, inputs, weights);
  }
  GradcheckResult res;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    float* p = x.data<float>();
    for (std::int64_t i = 0, count = x.numel(); i < count; ++i) {
      const float orig = p[i];
      p[i] = orig + static_cast<float>(opt.eps);
      const double hi = weighted_sum(f(inputs), weights);
      p[i] = orig - static_cast<float>(opt.eps);
      const double lo = weighted_sum(f(inputs), weights);
      p[i] = orig;
      const double actual_eps = (static_cast<double>(orig + static_cast<float>(opt.eps)) -
                                 static_cast<double>(orig - static_cast<float>(opt.eps))) / 2.0;
      const double numeric = (hi - lo) / (2.0 * actual_eps);
      const double a = analytic[k].defined() ? analytic[k].data<float>()[i] : 0.0;
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
