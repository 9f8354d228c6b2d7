#include <iostream>

#include "lockstep/tensor/compute_context.hpp"
#include "commands.hpp"

namespace lockstep::cli {

void add_devices_command(CLI::App& app) {
  app.add_subcommand("devices", "List the local devices lockstep can train on");
}

int run_devices() {
  for (const auto& d : list_local_devices()) std::cout << d.device.str() << "  " << d.description << "\n";
  // Built with CUDA: what the GPUs would run on (driver, runtime, cuDNN, NVML), also without a GPU.
  if (const std::string gpu = gpu_runtime_summary(); !gpu.empty()) std::cout << "# " << gpu << "\n";
  return 0;
}

}  // namespace lockstep::cli
