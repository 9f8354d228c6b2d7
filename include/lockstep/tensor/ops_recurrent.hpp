#pragma once
// Recurrent cells as single ops: one LSTM or GRU step in one pass each way (backend lstm_cell,
// gru_cell), where the composed ops (a gather per gate, sigmoids, tanhs, products and sums) were
// some twenty ops and tape records a step.
#include <array>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// One LSTM step with Keras' gates i, f, c, o (sigmoid gates, tanh candidate and output):
/// z = projected + recurrent ([batch, 4 units]), c = f c_prev + i tanh(z_c), h = o tanh(c).
/// Returns hc = [h; c] ([2, batch, units]), each value with the bits of the composed ops
/// (add, sigmoid, tanh, mul, each stored as the dtype). Recorded: projected's and recurrent's
/// gradient is dz, c_prev's is dc_prev, from one backward kernel. One floating dtype on one device;
/// ValueError naming the shapes otherwise.
Tensor lstm_cell(const Tensor& projected, const Tensor& recurrent, const Tensor& c_prev);
/// lstm_cell's kernels themselves, not recorded (what lstm_cell records; the parity rows run them):
/// {hc, gates} with gates = [i, f, tanh(z_c), o] ([batch, 4 units]) ...
std::array<Tensor, 2> lstm_cell_step(const Tensor& projected, const Tensor& recurrent, const Tensor& c_prev);
/// ... and from dhc = [dh; dc] ([2, batch, units]): {dz ([batch, 4 units]), dc_prev ([batch, units])}.
std::array<Tensor, 2> lstm_cell_grad(const Tensor& dhc, const Tensor& gates, const Tensor& c_prev, const Tensor& hc);

/// One GRU step as Keras 3 computes it by default (reset_after=True; gates z, r, h): x = the
/// step's input projection with its bias, inner = the recurrent product with its bias (each
/// [batch, 3 units]); z = sigmoid(x_z + inner_z), r = sigmoid(x_r + inner_r),
/// hh = tanh(x_h + r inner_h), h = z h_prev + (1 - z) hh ([batch, units]), each value with the
/// composed ops' bits. Recorded: x's, inner's and h_prev's gradients from one backward kernel.
Tensor gru_cell(const Tensor& x, const Tensor& inner, const Tensor& h_prev);
/// gru_cell's kernels, not recorded: {h, gates} with gates = [z, r, hh] ([batch, 3 units]) ...
std::array<Tensor, 2> gru_cell_step(const Tensor& x, const Tensor& inner, const Tensor& h_prev);
/// ... and from dh: {dx, dinner ([batch, 3 units]), dh_prev ([batch, units])}.
std::array<Tensor, 3> gru_cell_grad(const Tensor& dh, const Tensor& gates, const Tensor& inner, const Tensor& h_prev);

}  // namespace lockstep
