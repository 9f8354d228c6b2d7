// Recurrent cells (ops_recurrent.hpp): the LSTM and GRU steps' kernels and their recorded gradients.
#include "lockstep/tensor/ops_recurrent.hpp"

#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
// (batch, units) of one step's c_prev, after checking the gates' inputs against it.
// (batch, units) of one step's state (c_prev, h_prev), after checking the gates' inputs a and b
// ([batch, gates * units]) against it.
std::pair<std::int64_t, std::int64_t> check_step(const char* op, const Tensor& a, const Tensor& b,
                                                 const Tensor& state, int gates, const char* state_name) {
  detail::check_float(op, {&a, &b, &state});
  LOCKSTEP_CHECK(state.rank() == 2, op, ": ", state_name, " must be (batch, units), got ", state.shape().str());
  const Shape z{state.dim(0), gates * state.dim(1)};
  LOCKSTEP_CHECK(a.shape() == z && b.shape() == z, op, ": the gates' inputs must be (batch, ", gates, " units) = ",
                 z.str(), " for ", state_name, " ", state.shape().str(), ", got ", a.shape().str(), " and ",
                 b.shape().str());
  return {state.dim(0), state.dim(1)};
}

// The step's gradient: dz for projected and recurrent (the same values), dc_prev for c_prev.
class LstmCellGradient final : public CustomGradient {
 public:
  explicit LstmCellGradient(Tensor gates) : gates_(std::move(gates)) {}
  const char* name() const override { return "lstm_cell"; }
  std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g, const std::array<bool, 3>&) const override {
    const auto [dz, dc_prev] = lstm_cell_grad(g.to(r.output.dtype()), gates_, r.inputs[2], r.output);
    return {dz, dz, dc_prev};
  }

 private:
  Tensor gates_;  // i, f, tanh(z_c), o: [batch, 4 units]
};

// The GRU step's gradient: dx, dinner and dh_prev for its three inputs.
class GruCellGradient final : public CustomGradient {
 public:
  explicit GruCellGradient(Tensor gates) : gates_(std::move(gates)) {}
  const char* name() const override { return "gru_cell"; }
  std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g, const std::array<bool, 3>&) const override {
    return gru_cell_grad(g.to(r.output.dtype()), gates_, r.inputs[1], r.inputs[2]);
  }

 private:
  Tensor gates_;  // z, r, hh: [batch, 3 units]
};
}  // namespace

std::array<Tensor, 2> lstm_cell_step(const Tensor& projected, const Tensor& recurrent, const Tensor& c_prev) {
  constexpr const char* kName = "lstm_cell";
  const auto [batch, units] = check_step(kName, projected, recurrent, c_prev, 4, "c_prev");
  Tensor hc = Tensor::empty({2, batch, units}, c_prev.dtype()), gates = Tensor::empty(projected.shape(), c_prev.dtype());
  kern(kName, c_prev, backend::KernelOp::kLstmCell)
      .lstm_cell(ctx(), projected.raw_data(), recurrent.raw_data(), c_prev.raw_data(), batch, units, hc.raw_data(),
                 gates.raw_data());
  return {hc, gates};
}

std::array<Tensor, 2> lstm_cell_grad(const Tensor& dhc, const Tensor& gates, const Tensor& c_prev, const Tensor& hc) {
  constexpr const char* kName = "lstm_cell_grad";
  const auto [batch, units] = check_step(kName, gates, gates, c_prev, 4, "c_prev");
  const Shape halves{2, batch, units};
  detail::check_float(kName, {&dhc, &hc, &c_prev});
  LOCKSTEP_CHECK(dhc.shape() == halves && hc.shape() == halves, kName, ": dhc and hc must be (2, batch, units) = ",
                 halves.str(), ", got ", dhc.shape().str(), " and ", hc.shape().str());
  Tensor dz = Tensor::empty(gates.shape(), dhc.dtype()), dc_prev = Tensor::empty(c_prev.shape(), dhc.dtype());
  kern(kName, dhc, backend::KernelOp::kLstmCellBackward)
      .lstm_cell_backward(ctx(), dhc.raw_data(), gates.raw_data(), c_prev.raw_data(), hc.raw_data(), batch, units,
                          dz.raw_data(), dc_prev.raw_data());
  return {dz, dc_prev};
}

Tensor lstm_cell(const Tensor& projected, const Tensor& recurrent, const Tensor& c_prev) {
  auto [hc, gates] = lstm_cell_step(projected, recurrent, c_prev);
  if (detail::recording({&projected, &recurrent, &c_prev}))
    record_custom({projected, recurrent, c_prev}, hc, std::make_shared<LstmCellGradient>(std::move(gates)));
  return hc;
}

std::array<Tensor, 2> gru_cell_step(const Tensor& x, const Tensor& inner, const Tensor& h_prev) {
  constexpr const char* kName = "gru_cell";
  const auto [batch, units] = check_step(kName, x, inner, h_prev, 3, "h_prev");
  Tensor h = Tensor::empty(h_prev.shape(), h_prev.dtype()), gates = Tensor::empty(x.shape(), h_prev.dtype());
  kern(kName, h_prev, backend::KernelOp::kGruCell)
      .gru_cell(ctx(), x.raw_data(), inner.raw_data(), h_prev.raw_data(), batch, units, h.raw_data(), gates.raw_data());
  return {h, gates};
}

std::array<Tensor, 3> gru_cell_grad(const Tensor& dh, const Tensor& gates, const Tensor& inner, const Tensor& h_prev) {
  constexpr const char* kName = "gru_cell_grad";
  const auto [batch, units] = check_step(kName, gates, inner, h_prev, 3, "h_prev");
  detail::check_float(kName, {&dh, &h_prev});
  LOCKSTEP_CHECK(dh.shape() == h_prev.shape(), kName, ": dh must be (batch, units) = ", h_prev.shape().str(), ", got ",
                 dh.shape().str());
  Tensor dx = Tensor::empty(gates.shape(), dh.dtype()), dinner = Tensor::empty(gates.shape(), dh.dtype()),
         dh_prev = Tensor::empty(h_prev.shape(), dh.dtype());
  kern(kName, dh, backend::KernelOp::kGruCellBackward)
      .gru_cell_backward(ctx(), dh.raw_data(), gates.raw_data(), inner.raw_data(), h_prev.raw_data(), batch, units,
                         dx.raw_data(), dinner.raw_data(), dh_prev.raw_data());
  return {dx, dinner, dh_prev};
}

Tensor gru_cell(const Tensor& x, const Tensor& inner, const Tensor& h_prev) {
  auto [h, gates] = gru_cell_step(x, inner, h_prev);
  if (detail::recording({&x, &inner, &h_prev}))
    record_custom({x, inner, h_prev}, h, std::make_shared<GruCellGradient>(std::move(gates)));
  return h;
}

}  // namespace lockstep
