// `lockstep env`: the table of environment variables (src/core/env.cpp), with the values this
// process sees, then whether the environment passes the check every other command makes first.
#include <iostream>

#include "commands.hpp"
#include "core/env.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::cli {

void add_env_command(CLI::App& app) {
  app.add_subcommand("env", "List the environment variables lockstep reads: default, current value, documentation");
}

int run_env() {
  std::cout << env::describe();
  env::check();  // a typo or a malformed value: main reports it and exits with status 2
  return 0;
}

}  // namespace lockstep::cli
