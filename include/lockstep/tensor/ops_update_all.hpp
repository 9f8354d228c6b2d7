#pragma once
// Optimizer updates of several variables in one kernel launch (multi-tensor apply): on a GPU
// each launch costs microseconds however small the variable, so a step updates all its variables
// at once. Each variable's elements get the bits its own update (sgd_update_, adam_update_,
// rmsprop_update_ in lockstep/tensor/ops.hpp) gives them; the step's numbers are read from the step block.
#include <vector>

#include "lockstep/tensor/ops.hpp"

namespace lockstep {

/// sgd_update_(ws[i], momentums[i], grads[i], step, mu, nesterov) for every i (momentums empty
/// when mu == 0), in as few launches as the kernel's parameters allow. Every tensor float32 on
/// the step block's device; the lists of one length.
void sgd_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& momentums,
                     const std::vector<Tensor>& grads, const Tensor& step, float mu, bool nesterov);
/// adam_update_(ws[i], ms[i], vs[i], grads[i], step, b) for every i, likewise.
void adam_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& ms, std::vector<Tensor>& vs,
                      const std::vector<Tensor>& grads, const Tensor& step, const AdamBetas& b);
/// rmsprop_update_(ws[i], velocities[i], momentums[i], averages[i], grads[i], step, c) for every
/// i, likewise: momentums empty exactly when c.momentum == 0, averages empty unless centered.
void rmsprop_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& velocities, std::vector<Tensor>& momentums,
                         std::vector<Tensor>& averages, const std::vector<Tensor>& grads, const Tensor& step,
                         const RmspropConstants& c);
/// The same with the step's numbers given as values (lr; c's alpha and decay).
void sgd_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& momentums,
                     const std::vector<Tensor>& grads, float lr, float mu, bool nesterov);
void adam_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& ms, std::vector<Tensor>& vs,
                      const std::vector<Tensor>& grads, const AdamConstants& c);
void rmsprop_update_all_(std::vector<Tensor>& ws, std::vector<Tensor>& velocities, std::vector<Tensor>& momentums,
                         std::vector<Tensor>& averages, const std::vector<Tensor>& grads, float lr,
                         const RmspropConstants& c);

}  // namespace lockstep
