#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "model_commands.hpp"
#include "learning_rate.hpp"
#include "model_zoo.hpp"
#include "data_checks.hpp"
#include "run_directory.hpp"
#include "stop_signals.hpp"
#include "targets.hpp"
#include "text_model.hpp"
#include "worker_agreement.hpp"
#include "data/fingerprint.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/directory_lock.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/checkpointing.hpp"

namespace lockstep::cli {

namespace {
// CLI11's PositiveNumber prints the whole double range for a non-number; say it plainly. "inf",
// "nan" and "1e309" (which overflows to inf) are refused: they train to NaN.
const CLI::Validator kPositive(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !std::isfinite(v) || !(v > 0))
        return "must be a finite positive number, got '" + s + "'";
      return {};
    },
    "POSITIVE");
// CLI11 turns "-1" and "18446744073709551616" into 2^64 - 1 for an unsigned option: only digits
// that fit in 64 bits are a seed.
const CLI::Validator kSeed(
    [](std::string& s) -> std::string {
      errno = 0;
      char* end = nullptr;
      (void)std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || *end != '\0' || errno == ERANGE)
        return "must be an integer in [0, 2^64 - 1], got '" + s + "'";
      return {};
    },
    "UINT64");
const CLI::Validator kRate(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !(v >= 0 && v < 1)) return "must be a number in [0, 1), got '" + s + "'";
      return {};
    },
    "[0, 1)");
const CLI::Validator kNonNegative(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !std::isfinite(v) || !(v >= 0))
        return "must be a finite number >= 0, got '" + s + "'";
      return {};
    },
    ">= 0");
}  // namespace

const CLI::Validator& seed_validator() { return kSeed; }

void add_train_command(CLI::App& app, TrainArgs& a) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model (by default the flagship MLP: Dense(hidden, relu) -> Dropout -> Dense(10, softmax)) "
               "on MNIST or Fashion-MNIST and report the test loss and accuracy. With no flags: MNIST, 5 epochs.");
  cmd->add_option("--model", a.model,
                  "mlp (the flagship MLP), cnn (Keras' simple MNIST convnet: Conv2D(32, 3, relu) -> "
                  "MaxPooling2D -> Conv2D(64, 3, relu) -> MaxPooling2D -> Flatten -> Dropout -> Dense(10, softmax)), "
                  "resnet20 (ResNet-20, He et al. 2016: 3 stages of 3 residual blocks with BatchNormalization, "
                  "16/32/64 filters, on the data's image shape), "
                  "vit (a Vision Transformer: patches, PositionEmbedding, pre-norm encoder blocks of "
                  "MultiHeadAttention and a gelu MLP; --patch, --dim, --heads, --depth, --mlp), "
                  "gpt (a causal character transformer on --text: Embedding + PositionEmbedding, --depth pre-norm "
                  "blocks of causal MultiHeadAttention and Dense(4 dim, gelu) -> Dense(dim), LayerNormalization, "
                  "Dense(vocabulary) logits; next-character targets, the last 10% of the text for validation; "
                  "sample from it with `lockstep generate`) "
                  "or FILE.keras (a Keras 3 Sequential or Functional model: its layers, dtype policies and weights, trained further with "
                  "this command's optimizer and loss; --hidden, --activation and --dropout do not apply)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            for (const char* name : kModelNames)
              if (s == name) return {};
            if (is_keras_file(s)) return {};
            return "must be mlp, cnn, resnet20, vit, gpt or a FILE.keras, got '" + s + "'";
          },
          "mlp|cnn|resnet20|vit|gpt|FILE.keras"))
      ->capture_default_str();
  cmd->add_option("--dataset", a.dataset, "mnist or fashion_mnist")
      ->check(CLI::IsMember({"mnist", "fashion_mnist"}))
      ->capture_default_str();
  cmd->add_option("--data", a.data,
                  "Train on an .npz file instead of --dataset: arrays x_train, y_train, x_test, y_test as "
                  "keras.datasets returns them (uint8 images are scaled to [0, 1]); the input shape and the "
                  "number of classes (or, with --loss, of target values per example) come from the data");
  cmd->add_option("--num-classes", a.num_classes,
                  "Number of classes (the model's outputs); by default the largest label + 1, which may be at "
                  "most 65536")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 24));
  cmd->add_option("--loss", a.loss,
                  "Keras loss: sparse_categorical_crossentropy (integer class labels; the default), "
                  "categorical_crossentropy (one-hot rows (N, classes)), binary_crossentropy (0/1 targets, sigmoid "
                  "outputs), mse / mean_squared_error or mae / mean_absolute_error (float regression targets (N,) "
                  "or (N, k): linear outputs, the mae metric)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kLossNames), std::end(kLossNames))));
  cmd->add_option("--text", a.text,
                  std::string("--model gpt: a UTF-8 text file to learn; its characters are the vocabulary, saved "
                              "beside the model (default: the files of ") + kDefaultTextDir + ", each once, concatenated)");
  cmd->add_option("--sequence-length", a.sequence_length, "--model gpt: characters per example (the context)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("--epochs", a.epochs, "Number of epochs")->check(kPositive)->capture_default_str();
  cmd->add_option("--steps-per-epoch", a.steps_per_epoch,
                  "Steps per epoch (default: one pass over the training set)");
  cmd->add_option("--batch-size", a.batch_size,
                  "Batch size per replica (the global batch is this x replicas). Without this flag and "
                  "--global-batch-size the global batch is 32, Keras' default, split over the replicas")
      ->check(kPositive);
  cmd->add_option("--global-batch-size", a.global_batch_size, "Global batch size (instead of --batch-size)")
      ->check(kPositive);
  cmd->add_option("--devices", a.devices,
                  "Devices to train on: cpu:N for N logical CPU devices, or a list like gpu:0,gpu:1; gpu:0x4 is "
                  "four replicas on gpu:0 (default: every local GPU, else every logical CPU device; "
                  "LOCKSTEP_CPU_DEVICES sets the CPU count)");
  cmd->add_option("--gpu-memory-limit", a.gpu_memory_limit_mib,
                  "Each GPU replica's memory limit in MiB (TF's memory_limit of a logical GPU device; e.g. with "
                  "--devices gpu:0x4): a step that needs more fails naming the device, the bytes asked and the "
                  "bytes free")
      ->check(kPositive);
  cmd->add_option("--optimizer", a.optimizer, "sgd, adam, adamw or rmsprop (Keras' defaults beyond the rate)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop"}))
      ->capture_default_str();
  cmd->add_option("--learning-rate", a.learning_rate, "Learning rate")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--hidden", a.hidden, "Units of the hidden layer (mlp)")->check(kPositive)->capture_default_str();
  cmd->add_option("--activation", a.activation, "Activation of the hidden layer (mlp)")
      ->check(CLI::IsMember({"relu", "sigmoid", "tanh", "gelu", "silu", "swish", "linear"}))
      ->capture_default_str();
  char dropouts[160];
  std::snprintf(dropouts, sizeof dropouts, "(default: %g for mlp, %g for cnn, %g for vit; resnet20 and gpt have none)",
                default_dropout("mlp"), default_dropout("cnn"), default_dropout("vit"));
  cmd->add_option("--dropout", a.dropout, std::string("Dropout rate in [0, 1) ") + dropouts)->check(kRate);
  // The transformer's sizes: up to 65536 each, so a typo cannot ask for terabytes. Their defaults
  // are the models' own (model_zoo.hpp).
  const CLI::Range kSize(std::int64_t{1}, std::int64_t{1} << 16);
  const auto sizes = [](const char* flag) { return " (default " + size_defaults(flag) + ")"; };
  cmd->add_option("--patch", a.patch, "vit: patch size, dividing the images' height and width" + sizes("--patch"))
      ->check(kSize);
  cmd->add_option("--dim", a.dim, "vit, gpt: features per token, a multiple of --heads" + sizes("--dim"))->check(kSize);
  cmd->add_option("--heads", a.heads, "vit, gpt: attention heads" + sizes("--heads"))->check(kSize);
  cmd->add_option("--depth", a.depth, "vit: encoder blocks, gpt: decoder blocks" + sizes("--depth"))->check(kSize);
  cmd->add_option("--mlp", a.mlp, "vit: hidden units of each block's MLP" + sizes("--mlp"))->check(kSize);
  cmd->add_option("--seed", a.seed, "Seed for weights, shuffling and dropout")->check(kSeed)->capture_default_str();
  cmd->add_option("--metrics-out", a.metrics_out,
                  "Write {test_loss, test_accuracy, train_steps_per_second, history} as JSON to this file");
  cmd->add_option("--save-model", a.save_model,
                  "Also save the trained model to this path: FILE.keras is a Keras 3 archive that "
                  "keras.saving.load_model reads (weights and compile config), any other path a lockstep "
                  "saved-model folder (as <logdir>/model)");
  cmd->add_option("--logdir", a.logdir,
                  "Run directory for TensorBoard logs (train/, validation/), backups and checkpoints "
                  "(default: runs/<timestamp>)");
  cmd->add_flag("--resume", a.resume, "Continue the run found in --logdir from its last backup");
  cmd->add_flag("--save-best", a.save_best, "Keep the checkpoint with the best validation loss in <logdir>/best");
  cmd->add_option("--backup-every-steps", a.backup_every_steps,
                  "Also back up every N steps (default: at each epoch end)")
      ->check(CLI::Range(static_cast<std::int64_t>(0), static_cast<std::int64_t>(1) << 40));
  cmd->add_flag("!--no-tensorboard", a.tensorboard, "Do not write TensorBoard logs");
  cmd->add_flag("!--no-shard-update", a.shard_update,
                "Advanced, for comparisons (bench/compare_shard_update.sh): every CPU replica updates all of its "
                "copies instead of its shard (MirroredOptions::shard_optimizer_update false); the same weights, "
                "bit for bit. Under mpirun, one worker with it turns sharding off for all");
  cmd->add_flag("!--no-prefetch-to-device", a.prefetch_to_device,
                "Advanced, for comparisons (scripts/gpu_check.sh): on GPUs copy each batch to the devices when "
                "its step starts instead of while the step before runs (FitOptions::prefetch_to_device false); "
                "the same results, bit for bit");
  cmd->add_option("--collective-timeout", a.collective_timeout,
                  "Seconds a collective waits for a peer (a replica, or under mpirun another worker) before the "
                  "run fails naming it")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--verbose", a.verbose, "0 silent, 1 progress bar, 2 one line per epoch (default: 1 on a "
                                          "terminal, else 2)")
      ->check(CLI::Range(-1, 2));
  cmd->add_option("--policy", a.policy,
                  "Mixed precision (Keras' dtype policies): layers compute in float16 or bfloat16, variables, the "
                  "final softmax and the loss stay float32")
      ->check(CLI::IsMember({"float32", "mixed_float16", "mixed_bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--gradient-accumulation-steps", a.gradient_accumulation_steps,
                  "Sum the gradients of K batches and apply them as one update (all-reduced once): the "
                  "update of a K times larger batch in the memory of one")
      ->check(CLI::Range(static_cast<std::int64_t>(1), static_cast<std::int64_t>(1) << 20))
      ->capture_default_str();
  cmd->add_option("--steps-per-execution", a.steps_per_execution,
                  "Run N batches per host round trip (Keras' steps_per_execution): the loss and metrics are read, "
                  "and the progress bar and callbacks updated, once per N batches; the same weights as 1")
      ->check(CLI::Range(static_cast<std::int64_t>(1), static_cast<std::int64_t>(1) << 20))
      ->capture_default_str();
  cmd->add_option("--lr-schedule", a.lr_schedule,
                  "Learning-rate schedule after any warmup: constant, cosine (to 0 by the end), exponential (to a "
                  "tenth by the end) or piecewise (x0.1 at 1/2 and x0.01 at 3/4 of the steps)")
      ->check(CLI::IsMember({"constant", "cosine", "exponential", "piecewise"}))
      ->capture_default_str();
  cmd->add_option("--warmup-epochs", a.warmup_epochs,
                  "Raise the learning rate linearly from 0 over this many epochs (may be fractional; at most --epochs)")
      ->check(kNonNegative)
      ->capture_default_str();
  cmd->add_option("--lr-scaling", a.lr_scaling,
                  "linear: multiply --learning-rate by global batch / --lr-base-batch (the linear scaling rule)")
      ->check(CLI::IsMember({"none", "linear"}))
      ->capture_default_str();
  cmd->add_option("--lr-base-batch", a.lr_base_batch, "The global batch --learning-rate was tuned for (--lr-scaling)")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--jit-compile", a.jit_compile,
                  "Capture the train and test steps once into device graphs and replay them (Keras' jit_compile): auto "
                  "where the device and every op can be captured (else eager, saying why once), on (an error "
                  "naming what cannot be captured), off (always eager). The same results either way")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  // Which flags were given, not just their values: a model-specific one given for another model
  // is an error (check_model_flags), where its default would be ignored silently.
  cmd->parse_complete_callback([cmd, &a] {
    for (const CLI::Option* option : cmd->get_options())
      if (option->count() > 0) a.given.insert(option->get_name());
  });
}

namespace {
distribute::MirroredOptions parse_devices(const std::string& spec) {
  distribute::MirroredOptions o;
  if (spec.empty()) return o;
  // "cpu:N" alone means N logical CPU devices; otherwise a comma-separated device list.
  if (spec.rfind("cpu:", 0) == 0 && spec.find(',') == std::string::npos) {
    const Device d = Device::parse(spec);
    LOCKSTEP_CHECK(d.index >= 1 && d.index <= distribute::kMaxCpuDevices, "--devices cpu:N needs N in [1, ",
                   distribute::kMaxCpuDevices, "], got '", spec, "'");
    o.num_cpu_devices = d.index;
    return o;
  }
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t comma = spec.find(',', start);
    const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    // A malformed entry is an error naming it; "gpu:0x4" (logical devices) is the strategy's to check.
    if (item.find('x') == std::string::npos) (void)Device::parse(item);
    o.devices.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return o;
}
}  // namespace

namespace {
// runs/<timestamp>, claimed atomically (create_directory fails if it exists), so that two runs
// started in the same second get runs/<timestamp> and runs/<timestamp>-2.
std::string default_logdir() {
  char buf[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "runs/%Y%m%d-%H%M%S", std::localtime(&now));
  std::filesystem::create_directories("runs");
  for (int i = 1;; ++i) {
    const std::string name = i == 1 ? std::string(buf) : std::string(buf) + "-" + std::to_string(i);
    if (std::filesystem::create_directory(name)) return name;
  }
}

int train_with(const TrainArgs& a, distribute::Strategy& strategy, WorkerAgreement& agreement);

// "2 workers x cpu:0, cpu:1": what a backup records of where the run trained.
std::string device_layout(const distribute::Strategy& strategy) {
  std::string out = std::to_string(strategy.num_workers()) + (strategy.num_workers() == 1 ? " worker x " : " workers x ");
  for (std::size_t r = 0; r < strategy.devices().size(); ++r) out += (r ? ", " : "") + strategy.devices()[r].str();
  return out;
}
}  // namespace

int run_train(const TrainArgs& a) {
  LOCKSTEP_CHECK(a.steps_per_epoch == -1 || a.steps_per_epoch > 0, "--steps-per-epoch must be positive");
  // The schedules count steps in doubles: 2^53 is where they stop being exact (2^62 x epochs
  // overflowed the total).
  constexpr std::int64_t kMaxTotalSteps = std::int64_t{1} << 53;
  LOCKSTEP_CHECK(a.steps_per_epoch <= kMaxTotalSteps / a.epochs, "--steps-per-epoch ", a.steps_per_epoch,
                 " x --epochs ", a.epochs, " is more than 2^53 steps, lockstep's bound for a run");
  LOCKSTEP_CHECK(!a.resume || !a.logdir.empty(), "--resume needs --logdir naming the run to continue");
  check_model_flags(a);
  LOCKSTEP_CHECK(a.model != "gpt" || (a.data.empty() && (a.loss.empty() || a.loss == "sparse_categorical_crossentropy")),
                 "--model gpt learns the characters of --text with sparse_categorical_crossentropy; --data and other "
                 "--loss values do not apply");
  // A backup inside an accumulation group would lose the group's held-back gradients.
  LOCKSTEP_CHECK(a.backup_every_steps % a.gradient_accumulation_steps == 0, "--backup-every-steps ",
                 a.backup_every_steps, " must be a multiple of --gradient-accumulation-steps ",
                 a.gradient_accumulation_steps, " (a backup within a group would lose its gradients)");
  // Backups are made between executions, where the callbacks run.
  LOCKSTEP_CHECK(a.backup_every_steps % a.steps_per_execution == 0, "--backup-every-steps ", a.backup_every_steps,
                 " must be a multiple of --steps-per-execution ", a.steps_per_execution,
                 " (backups are made between executions)");
  // Before any training: a result that cannot be written is found out now, not after an hour.
  if (!a.metrics_out.empty()) io::check_output_path(a.metrics_out, "--metrics-out");
  if (!a.save_model.empty() && is_keras_file(a.save_model)) io::check_output_path(a.save_model, "--save-model");
  set_random_seed(a.seed);
  LOCKSTEP_CHECK(a.collective_timeout <= 1e9, "--collective-timeout ", a.collective_timeout, " s is too long");
  LOCKSTEP_CHECK(a.gpu_memory_limit_mib <= 1e9, "--gpu-memory-limit ", a.gpu_memory_limit_mib, " MiB is too large");
  // 1e-300 became 0 bytes, which means "no limit": refused rather than turned into its opposite.
  LOCKSTEP_CHECK(a.gpu_memory_limit_mib == 0 || a.gpu_memory_limit_mib >= 1, "--gpu-memory-limit ",
                 a.gpu_memory_limit_mib, " MiB is less than 1 MiB (0 would mean no limit); give at least 1");
  distribute::MultiWorkerOptions strategy_options{.local = parse_devices(a.devices), .notice = false};
  strategy_options.local.gpu_memory_limit = static_cast<std::uint64_t>(a.gpu_memory_limit_mib * 1048576.0);
  strategy_options.local.shard_optimizer_update = a.shard_update;
  strategy_options.local.collective_timeout =
      std::max(std::chrono::milliseconds(1), std::chrono::milliseconds(static_cast<std::int64_t>(a.collective_timeout * 1000)));
  // Under mpirun each rank is a worker with these local devices; otherwise one process.
  distribute::MultiWorkerMirroredStrategy strategy(strategy_options);
  // A start-up check failing on this worker from here on stops the others at once (agree()),
  // and so does an error after the start-up (announce_failure), instead of the collective timeout.
  WorkerAgreement agreement(strategy);
  try {
    return train_with(a, strategy, agreement);
  } catch (const training::Interrupted&) {
    throw;  // every worker stopped after the same step
  } catch (const std::exception& e) {
    if (agreement.settled()) strategy.announce_failure(e.what());
    throw;
  }
}

namespace {
// run_train once the strategy is made: the data, the model, the run directory, fit and the results.
int train_with(const TrainArgs& a, distribute::Strategy& strategy, WorkerAgreement& agreement) {
  const int replicas = strategy.num_replicas_in_sync();
  LOCKSTEP_CHECK(a.gpu_memory_limit_mib == 0 || strategy.devices().front().kind != DeviceKind::kCpu,
                 "--gpu-memory-limit applies to GPU replicas; this run trains on CPU devices (",
                 strategy.devices().front().str(), ", ...), which share the host's memory");
  // Other workers write nothing shared: no files, no output but errors.
  const bool chief = strategy.is_chief();
  if (chief) {
    std::printf("Detected %d device%s: ", replicas, replicas == 1 ? "" : "s");
    const int local = strategy.num_local_replicas();
    for (int r = 0; r < local; ++r) std::printf("%s%s", r ? ", " : "", strategy.devices()[static_cast<std::size_t>(r)].str().c_str());
    if (strategy.num_workers() > 1) std::printf(" on each of %d workers (MPI ranks)", strategy.num_workers());
    std::printf("\n");
  }
  // Keras' fit(batch_size=32) is the global batch under a strategy; an explicit --batch-size
  // follows the usual per-replica rule.
  constexpr std::int64_t kDefaultGlobalBatch = 32;
  LOCKSTEP_CHECK(a.batch_size <= std::numeric_limits<std::int64_t>::max() / replicas, "--batch-size ", a.batch_size,
                 " x ", replicas, " replicas overflows 64 bits; give a smaller --batch-size");
  const std::int64_t global_batch = a.global_batch_size > 0 ? a.global_batch_size
                                    : a.batch_size > 0      ? a.batch_size * replicas
                                                            : std::max<std::int64_t>(kDefaultGlobalBatch, replicas);
  // --model gpt: windows of characters, the last 10% of the text as the test (validation) split.
  const std::optional<data::CharText> text = a.model == "gpt" ? std::optional(load_text(a)) : std::nullopt;
  if (text && chief)
    std::printf("Text: %lld characters, a vocabulary of %lld; %lld training and %lld validation windows of %lld; "
                "unigram entropy %.4f nats per character\n",
                static_cast<long long>(text->characters), static_cast<long long>(text->vocabulary.size()),
                static_cast<long long>(text->x_train.dim(0)), static_cast<long long>(text->x_validation.dim(0)),
                static_cast<long long>(a.sequence_length), text->unigram_entropy);
  const datasets::TrainTest data = text                  ? text_splits(*text)
                                    : !a.data.empty()      ? datasets::load_npz(a.data, {.any_targets = true})
                                    : a.dataset == "mnist" ? datasets::mnist::load_data()
                                                           : datasets::fashion_mnist::load_data();
  if (!a.data.empty()) check_finite_data(data, "--data '" + a.data + "'");
  const TargetPlan targets =
      text ? text_targets(*text) : plan_targets(a, data, a.data.empty() ? "--dataset " + a.dataset : "--data '" + a.data + "'");
  // Images (N, H, W) become (N, H, W, 1) for a convolutional model, rows of features for the MLP.
  Shape image = data.train.x.shape().tail();
  if (image.rank() == 2) image = Shape{image[0], image[1], 1};
  // A Keras file fixes the input and output shapes; it is read now so that a bad file or a
  // mismatch with the data is found before the run directory is claimed.
  std::optional<Shape> file_input;
  // uint8 images stay uint8 through the pipeline when the model scales them itself (a Keras
  // file's model that starts with Rescaling). For any other, the zoo's included, the pipeline
  // scales them to [0, 1] as it gathers a batch, the training and the test set's alike
  // (image_slices: the rows are read as bytes, a quarter of the floats' traffic, no float32 copy
  // of either set is held, and the model gets the same floats as from pixels scaled beforehand).
  bool model_rescales = false;
  if (is_keras_file(a.model)) {
    // Uncompiled (Keras' compile=False): this command compiles it with its own flags.
    const auto file = load_model(a.model, {.compile = false});
    check_one_input_and_output(*file, a.model);
    model_rescales = rescales_its_input(*file);
    file_input = file->input_shape().tail();
    const std::int64_t outputs = file->output_shape()[-1];
    LOCKSTEP_CHECK(file_input->numel() == image.numel(), "--model '", a.model, "' takes examples of shape ",
                   file_input->str(), " (", file_input->numel(), " values) but the data's are ", image.str(), " (",
                   image.numel(), " values)");
    if (targets.class_labels)
      LOCKSTEP_CHECK(outputs >= targets.outputs, "--model '", a.model, "' has ", outputs,
                     " outputs but the labels hold ", targets.outputs, " classes");
    else
      LOCKSTEP_CHECK(outputs == targets.outputs, "--model '", a.model, "' has ", outputs, " outputs but --loss ",
                     targets.loss, " has ", targets.outputs, " target value(s) per example (y_train ",
                     data.train.y.shape().str(), ")");
  }
  LOCKSTEP_CHECK(a.model == "mlp" || text || file_input || image.rank() == 3, "--model ", a.model,
                 " needs images (N, height, width) or (N, height, width, channels), but the examples have shape ",
                 image.str());
  if (!file_input) check_model_sizes(a, image, targets.outputs);  // before the run directory is claimed
  const auto to_input = [&](const Tensor& images) {
    const Tensor rows = flatten_images_for(images, model_rescales || images.dtype() == DType::kU8);
    std::vector<std::int64_t> dims{rows.dim(0)};
    const Shape per_example = file_input ? *file_input : model_input_shape(a.model, image);
    for (auto d : per_example.dims()) dims.push_back(d);
    return rows.reshape(Shape(std::move(dims)));
  };
  const Tensor x_train = text ? data.train.x : to_input(data.train.x);
  const Tensor x_test = text ? data.test.x : to_input(data.test.x);
  TrainArgs resolved = a;
  if (resolved.dropout < 0) resolved.dropout = default_dropout(a.model);
  // Optimizer updates per epoch (what the schedule counts): a group of accumulated batches is
  // one, and never spans two epochs.
  const std::int64_t batches_per_epoch =
      a.steps_per_epoch > 0 ? a.steps_per_epoch : (x_train.dim(0) + global_batch - 1) / global_batch;
  const std::int64_t k = a.gradient_accumulation_steps;
  const LearningRatePlan lr = plan_learning_rate(a, (batches_per_epoch + k - 1) / k, global_batch * k);
  if (chief) std::printf("%s\n", lr.description.c_str());
  // Every worker must run this same run on the same data (a mixed model otherwise); a resumed
  // run says when its data or devices changed.
  const std::string data_signature =
      data::detail::tensors_signature({data.train.x, data.train.y, data.test.x, data.test.y});
  agreement.agree(resolved, global_batch, data_signature);

  // The run directory is claimed only once the devices and the data are known to be good.
  // Another worker reads the chief's backups from --logdir (a shared or identical path) and
  // without it has none to read.
  const std::string logdir = a.logdir.empty() ? (chief ? default_logdir() : std::string()) : a.logdir;
  if (a.resume)
    LOCKSTEP_CHECK_T(IOError, std::filesystem::is_directory(logdir), "--resume: run directory '", logdir,
                     "' does not exist (nothing to continue; run without --resume to start a new run)");
  std::optional<io::DirectoryLock> lock;
  if (chief) {
    io::make_directories(logdir);
    // Held until the process ends: a second run on this directory fails here, naming this one.
    lock.emplace(logdir);
    // Writes of killed runs left these; a live writer's (lockstep evaluate into the run) is kept.
    if (const int stale = remove_stale_run_temporaries(logdir); stale > 0)
      std::fprintf(stderr, "Removed %d temporary file(s) left in %s by killed runs\n", stale, logdir.c_str());
  }
  const std::string backup_dir = logdir.empty() ? std::string() : logdir + "/backup";
  const bool has_backup = !logdir.empty() && std::filesystem::exists(backup_dir + "/checkpoint");
  const RunConfig run_config =
      with_run_context(make_run_config(resolved, global_batch), data_signature, device_layout(strategy));
  if (a.resume) {
    LOCKSTEP_CHECK_T(IOError, has_backup, "--resume: no backup found in '", backup_dir,
                     "' (nothing to continue; run without --resume to start a new run)");
    check_resume(backup_dir, run_config);
  } else if (chief) {
    LOCKSTEP_CHECK(!has_backup, "'", logdir, "' already holds a run; pass --resume to continue it or choose another "
                   "--logdir");
  }
  agreement.ready();  // every worker passed its start-up checks
  auto scope = strategy.scope();
  mixed_precision::set_global_policy(a.policy);
  if (chief && a.policy != "float32") std::printf("Mixed precision policy: %s\n", a.policy.c_str());
  // Made under the strategy's scope, so its variables are mirrored; a Keras file's weights are
  // its starting point (Keras' load_model, then fit).
  const std::unique_ptr<Model> built =
      file_input ? load_model(a.model, {.compile = false})
                 : build_model(a, image, targets.outputs, targets.activation, resolved.dropout);
  Model& model = *built;
  model.compile(optimizers::get(a.optimizer, lr.schedule),
                text ? losses::SparseCategoricalCrossentropy({.from_logits = true}) : losses::get(targets.loss),
                targets.metrics);
  model.set_jit_compile(parse_jit_compile(a.jit_compile));
  model.set_steps_per_execution(a.steps_per_execution);
  const int verbose = chief ? a.verbose : 0;
  if (verbose != 0) std::cout << model.summary();

  auto ds = image_slices(x_train, data.train.y, model_rescales)
                .shuffle(x_train.dim(0), a.seed)
                .batch(global_batch)
                .prefetch(data::kAutotune);
  FitOptions fit_options{.epochs = a.epochs,
                         .verbose = verbose,
                         .gradient_accumulation_steps = static_cast<int>(a.gradient_accumulation_steps),
                         .prefetch_to_device = a.prefetch_to_device};
  // First, so that no other callback sees a batch after the loss went NaN.
  const auto nan_guard = std::make_shared<TerminateOnNaN>();
  fit_options.callbacks.push_back(nan_guard);
  const data::Dataset test_set = image_slices(x_test, data.test.y, model_rescales).batch(1024);
  fit_options.validation_data = test_set;
  if (chief) std::printf("Run directory: %s\n", logdir.c_str());
  if (a.tensorboard && chief)
    fit_options.callbacks.push_back(std::make_shared<TensorBoard>(TensorBoardOptions{.log_dir = logdir}));
  if (!backup_dir.empty()) {
    fit_options.callbacks.push_back(std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{
        .backup_dir = backup_dir,
        .save_freq = a.backup_every_steps > 0 ? SaveFreq::every(a.backup_every_steps) : SaveFreq::epoch(),
        .delete_checkpoint = false,
        .is_chief = chief,
        .run_config = run_config}));
  }
  if (a.save_best && chief) {
    fit_options.callbacks.push_back(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.filepath = logdir + "/best/ckpt", .monitor = "val_loss", .save_best_only = true}));
  }
  if (a.steps_per_epoch > 0) {
    ds = ds.repeat();
    fit_options.steps_per_epoch = a.steps_per_epoch;
  }
  // SIGTERM/SIGINT/SIGHUP stop every worker at one step boundary, with a backup (main prints it).
  std::optional<StopSignals> stop_signals(std::in_place);
  const History history = model.fit(ds, fit_options);
  // A signal after the last step boundary: the epoch-end backup is whole.
  const std::optional<training::AgreedStop> stop = training::agreed_stop(&strategy);
  stop_signals.reset();
  if (stop)
    throw training::Interrupted(stop->reason, a.epochs - 1, batches_per_epoch, backup_dir,
                                strategy.num_workers() > 1 ? stop->worker : -1);
  // A diverged run is a failure, not a result: no model is saved and the exit status says so.
  if (nan_guard->terminated())
    throw Error(detail::concat("training diverged: the loss became NaN or infinite at epoch ", nan_guard->epoch() + 1,
                               ", batch ", nan_guard->batch() + 1,
                               "; no model was saved (try a lower --learning-rate, and start a new run)"));
  const Logs test = model.evaluate(test_set);
  std::fflush(stdout);
  if (!chief) return 0;
  const double steps_per_second = model.last_fit_timing().steps_per_second;
  save_model(model, logdir + "/model");
  if (text) save_vocabulary(logdir + "/model", text->vocabulary);
  if (!a.save_model.empty()) {
    save_model(model, a.save_model);
    if (text) save_vocabulary(a.save_model, text->vocabulary);
    std::fprintf(stderr, "Saved the model to %s\n", a.save_model.c_str());
  }
  std::printf("test_loss: %.4f", test.at("loss"));
  for (const auto& m : targets.metrics) std::printf(" - test_%s: %.4f", m.c_str(), test.at(m));
  std::printf(" - train_steps_per_second: %.1f\n", steps_per_second);

  if (!a.metrics_out.empty()) {
    nlohmann::json j;
    j["test_loss"] = test.at("loss");
    if (text) j["unigram_entropy"] = text->unigram_entropy;
    for (const auto& m : targets.metrics) j["test_" + m] = test.at(m);
    j["train_steps_per_second"] = steps_per_second;
    j["history"] = history.history;
    j["epochs"] = history.epoch;
    j["replicas"] = replicas;
    j["workers"] = strategy.num_workers();
    j["global_batch_size"] = global_batch;
    j["gradient_accumulation_steps"] = a.gradient_accumulation_steps;
    j["steps_per_execution"] = a.steps_per_execution;
    // Why the train steps ran eagerly ("auto" on a GPU), or "" (captured, or jit_compile off).
    j["jit_compile_reason"] = model.jit_compile_reason();
    j["policy"] = a.policy;
    j["learning_rate"] = lr.peak;
    j["warmup_steps"] = lr.warmup_steps;
    io::write_file_atomic(a.metrics_out, j.dump(2) + "\n");
  }
  return 0;
}
}  // namespace

}  // namespace lockstep::cli
