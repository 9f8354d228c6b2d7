// The `lockstep` command: train, devices, bench, evaluate, predict, generate, env. A bad flag, or a
// LOCKSTEP_* environment variable that is unknown or malformed, is an error with status 2.
#include <cstdio>
#include <iostream>

#include <unistd.h>

#include "commands.hpp"
#include "core/env.hpp"
#include "model_commands.hpp"
#include "stop_signals.hpp"
#include "text_model.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/training/preemption.hpp"
#include "lockstep/training/stop_signals_routed.hpp"

int main(int argc, char** argv) {
  const lockstep::training::StopSignalsRouted stop_signals_routed;  // before any other thread starts
  CLI::App app{"lockstep: synchronous data-parallel training of neural networks"};
  app.require_subcommand(1);
  lockstep::cli::TrainArgs train_args;
  lockstep::cli::add_train_command(app, train_args);
  lockstep::cli::add_devices_command(app);
  lockstep::cli::add_env_command(app);
  lockstep::cli::BenchArgs bench_args;
  lockstep::cli::add_bench_command(app, bench_args);
  lockstep::cli::ModelArgs model_args;
  lockstep::cli::add_model_commands(app, model_args);
  lockstep::cli::GenerateArgs generate_args;
  lockstep::cli::add_generate_command(app, generate_args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage of the command that was being parsed, then the error; status 2 as getopt tools do.
    const auto subs = app.get_subcommands();
    std::cerr << (subs.empty() ? app.help() : subs.back()->help()) << "\nerror: " << e.what() << "\n";
    return 2;
  }
  try {
    if (app.got_subcommand("env")) return lockstep::cli::run_env();
    lockstep::env::check();  // before any work: a typo'd switch is not silently ignored
    if (app.got_subcommand("train")) return lockstep::cli::run_train(train_args);
    if (app.got_subcommand("devices")) return lockstep::cli::run_devices();
    if (app.got_subcommand("bench")) return lockstep::cli::run_bench_allreduce(bench_args);
    if (app.got_subcommand("evaluate")) return lockstep::cli::run_evaluate(model_args);
    if (app.got_subcommand("predict")) return lockstep::cli::run_predict(model_args);
    if (app.got_subcommand("generate")) return lockstep::cli::run_generate(generate_args);
  } catch (const lockstep::training::Interrupted& e) {
    // SIGTERM, SIGINT or SIGHUP stopped training at a step boundary (stop_signals.hpp); the
    // status is the shell's for that signal.
    std::fflush(stdout);
    if (isatty(fileno(stderr))) std::cerr << "\n";  // past a progress bar's line (and a ^C)
    const std::string saved = e.backup_dir().empty()
                                  ? std::string("no backup saved")
                                  : "backup saved in " + e.backup_dir() + "; resume with --resume";
    const std::string where = e.worker() >= 0 ? " (sent to worker " + std::to_string(e.worker()) + ")" : "";
    std::cerr << "Interrupted by " << lockstep::training::stop_reason_name(e.reason()) << where << " at epoch "
              << e.epoch() + 1 << ", step " << e.steps_in_epoch() << ": " << saved << "\n";
    return e.reason() > 0 ? 128 + e.reason() : 1;
  } catch (const lockstep::ValueError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const lockstep::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
