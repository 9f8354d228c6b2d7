#include <iostream>

#include "lockstep/tensor/compute_context.hpp"
#include "commands.hpp"

namespace lockstep::cli {

void add_devices_command(CLI::App& app) {
  app.add_subcommand("devices", "List the local devices lockstep can train on");
}

int run_devices() {
  for (const auto& d : list_local_devices()) std::cout << d.device.str() << "  " << d.description << "\n";
  return 0;
}

}  // namespace lockstep::cli
