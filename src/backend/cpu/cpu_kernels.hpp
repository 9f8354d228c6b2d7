#pragma once
#include "backend/kernels.hpp"

namespace lockstep::backend::cpu {
const KernelTable& table();
}
