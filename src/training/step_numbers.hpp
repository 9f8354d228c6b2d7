#pragma once
// What tests see of step_numbers.cpp (the merge of the steps' numbers into a model's trackers).
#include <cstdint>

namespace lockstep::detail {

/// How many times this process read summed step numbers to the host (Model::read_numbers: one
/// per execution of fit or evaluate, or one per several when fit defers its reads).
std::int64_t host_number_reads();

}  // namespace lockstep::detail
