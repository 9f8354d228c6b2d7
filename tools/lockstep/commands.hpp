#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <set>
#include <string>

namespace lockstep::cli {

struct TrainArgs {
  std::string model = "mlp";            // model_zoo.hpp: mlp or cnn
  std::string dataset = "mnist";
  std::string data;                     // an .npz (x_train, y_train, x_test, y_test) instead of --dataset
  std::int64_t num_classes = 0;         // --num-classes; 0: inferred from the labels
  std::string loss;                     // --loss, a Keras loss name; empty: sparse_categorical_crossentropy
  int epochs = 5;
  std::int64_t steps_per_epoch = -1;
  std::int64_t batch_size = -1;         // per replica; -1: neither flag given, global batch 32
  std::int64_t global_batch_size = -1;  // overrides batch_size x replicas
  std::string devices;                  // "cpu:N", "gpu:0,gpu:1"; empty: every local device
  std::string optimizer = "adam";
  double learning_rate = 1e-3;
  std::int64_t hidden = 128;
  std::string activation = "relu";
  double dropout = -1;                  // -1: the model's default (mlp 0.2, cnn 0.5)
  // The transformers' sizes (--patch, --dim, --heads, --depth, --mlp; gpt takes the middle three);
  // 0 (not given): the model's default (model_zoo.hpp).
  std::int64_t patch = 0, dim = 0, heads = 0, depth = 0, mlp = 0;
  std::uint64_t seed = 0;
  std::string metrics_out;
  std::string save_model;               // also save the trained model here (FILE.keras: a Keras archive)
  std::string logdir;                   // default runs/<timestamp>
  bool resume = false;
  bool save_best = false;
  std::int64_t backup_every_steps = 0;  // 0: back up at each epoch end
  bool tensorboard = true;
  int verbose = -1;
  std::string lr_schedule = "constant";  // constant | cosine | exponential | piecewise
  double warmup_epochs = 0;              // linear warmup from 0, in epochs (may be fractional)
  std::string lr_scaling = "none";       // none | linear (x global batch / lr_base_batch)
  std::int64_t lr_base_batch = 32;       // the batch --learning-rate was tuned for
  std::int64_t gradient_accumulation_steps = 1;
  std::int64_t steps_per_execution = 1;  // batches per host round trip (Keras' steps_per_execution)
  std::string policy = "float32";        // float32 | mixed_float16 | mixed_bfloat16
  std::string jit_compile = "auto";      // auto | on | off
  double collective_timeout = 60;       // seconds a collective waits for a peer (worker or replica)
  double gpu_memory_limit_mib = 0;      // each GPU replica's memory limit (0: none)
  bool shard_update = true;             // advanced, for comparisons: --no-shard-update
  bool prefetch_to_device = true;       // advanced, for comparisons: --no-prefetch-to-device
  // --model gpt (text_model.hpp): the text and the window (its sizes: --dim, --heads, --depth above).
  std::string text;                     // empty: /usr/share/common-licenses
  std::int64_t sequence_length = 64;
  std::set<std::string> given;          // the flags on the command line ("--patch"): check_model_flags
};

void add_train_command(CLI::App& app, TrainArgs& args);
/// --seed's check: an integer in [0, 2^64 - 1] (CLI11 alone wraps "-1" to 2^64 - 1).
const CLI::Validator& seed_validator();
int run_train(const TrainArgs& args);

struct BenchArgs {
  std::string devices;
  std::int64_t min_bytes = 4 << 10;
  std::int64_t max_bytes = 256LL << 20;
  bool workers = false;  // across the workers of an MPI job, against raw MPI_Allreduce
};
void add_bench_command(CLI::App& app, BenchArgs& args);
int run_bench_allreduce(const BenchArgs& args);

void add_devices_command(CLI::App& app);
int run_devices();

void add_env_command(CLI::App& app);
int run_env();

}  // namespace lockstep::cli
