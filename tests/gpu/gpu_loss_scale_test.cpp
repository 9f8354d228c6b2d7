// Loss scaling (mixed_float16) where replayed steps (jit_compile) keep the scale on the device
// and the host's copy is read back only when asked: what else meets that copy takes the device's.
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/io/event_file_reader.hpp"
#include "lockstep/tensor/host_reads.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {
struct MixedFloat16 {  // the global policy outlives the test, however it ends
  MixedFloat16() { mixed_precision::set_global_policy("mixed_float16"); }
  ~MixedFloat16() { mixed_precision::set_global_policy("float32"); }
};
}  // namespace

// Six steps on one replica (the fifth overflows: a replay skips it and halves the scale on the
// device while the host counts it as applied), then the model is mirrored over two logical
// replicas with no read in between, and two more steps run: the new copies of the step blocks
// start from the device's scale and count, not the host's stale ones, so the scale, the skipped
// count, iterations and the weights are those of jit_compile off.
TEST(GpuLossScale, VariablesMirroredAgainAfterReplaysStartFromTheDevicesScale) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 8, 12, 4, 3);
  std::vector<float> xs = d.x.to_vector<float>();
  xs[16 * 12 * 4 + 5] = std::numeric_limits<float>::infinity();  // the fifth batch's first row
  const std::vector<std::int64_t> ys = d.y.to_vector<std::int64_t>();
  const auto batch = [&](std::int64_t b) {
    const auto x0 = xs.begin() + b * 16 * 12;
    const auto y0 = ys.begin() + b * 16;
    return std::pair{Tensor::from_vector(std::vector<float>(x0, x0 + 16 * 12), {16, 12}),
                     Tensor::from_vector(std::vector<std::int64_t>(y0, y0 + 16), {16})};
  };
  const MixedFloat16 policy;
  struct Run {
    std::string reason;
    std::vector<double> state;  // the scale, the skipped count, iterations
    std::vector<std::vector<float>> weights;
  };
  const auto run = [&](JitCompile mode) {
    MirroredStrategy one({.devices = {"gpu:0"}}), two({.devices = {"gpu:0x2"}});
    std::unique_ptr<Sequential> m;
    {
      auto scope = one.scope();
      set_random_seed(7);
      m = std::make_unique<Sequential>(
          std::vector<layers::LayerPtr>{layers::Dense(32, "relu", 12), layers::Dense(4, "softmax")});
      m->compile(optimizers::LossScale(optimizers::Adam(1e-2), {.dynamic_growth_steps = 3}),
                 losses::SparseCategoricalCrossentropy());
      m->set_jit_compile(mode);
    }
    for (std::int64_t b = 0; b < 6; ++b) m->train_step(batch(b).first, batch(b).second);
    Run out;
    out.reason = m->jit_compile_reason();
    m->distribute(two);
    for (std::int64_t b = 6; b < 8; ++b) m->train_step(batch(b).first, batch(b).second);
    const auto& lso = dynamic_cast<const optimizers::LossScaleOptimizer&>(*m->optimizer());
    out.state = {lso.loss_scale(), static_cast<double>(lso.skipped_steps()), static_cast<double>(lso.iterations())};
    for (const auto& v : m->variables()) out.weights.push_back(v.read_value().to_vector<float>());
    return out;
  };
  const Run on = run(JitCompile::kAuto), off = run(JitCompile::kOff);
  if (step_capture_refusal(Device::parse("gpu:0")).empty()) {
    EXPECT_EQ(on.reason, "");  // replayed
  }
  EXPECT_EQ(off.state[1], 1);  // skipped
  EXPECT_EQ(off.state[2], 7);  // iterations
  EXPECT_EQ(on.state, off.state);
  EXPECT_EQ(on.weights, off.weights);
}

// TensorBoard's per-batch scalars number their steps by the host's count: a replayed step (its
// scale and count kept on the device) reads only its logs with them as without, on one replica
// and on two logical ones; the eager first step reads its skipped mark on each replica too.
TEST(GpuLossScale, PerBatchTensorBoardScalarsReadNothingBeyondTheLogs) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 4, 12, 4, 3);
  const MixedFloat16 policy;
  for (const std::string devices : {"gpu:0", "gpu:0x2"}) {
    SCOPED_TRACE(devices);
    MirroredStrategy strategy({.devices = {devices}});
    auto scope = strategy.scope();
    set_random_seed(7);
    auto m = std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(32, "relu", 12), layers::Dense(4, "softmax")});
    m->compile(optimizers::LossScale(optimizers::Adam(1e-2)), losses::SparseCategoricalCrossentropy());
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("lockstep-tb-reads-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);
    std::vector<std::uint64_t> reads{detail::host_reads()};
    const auto count = std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_train_batch_end = [&](std::int64_t, const Logs&) { reads.push_back(detail::host_reads()); }});
    const auto board = std::make_shared<TensorBoard>(
        TensorBoardOptions{.log_dir = dir, .update_freq = SaveFreq::every(1), .write_model_summary = false});
    m->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .shuffle = false, .verbose = 0, .callbacks = {board, count}});
    const bool replayed = m->jit_compile_reason().empty();
    const auto replicas = static_cast<std::uint64_t>(strategy.num_replicas_in_sync());
    ASSERT_EQ(reads.size(), 5u);
    for (std::size_t i = 2; i < reads.size(); ++i)
      EXPECT_EQ(reads[i] - reads[i - 1], replayed ? 1 : 1 + replicas) << "batch " << i - 1;
    std::vector<std::int64_t> steps;
    for (const auto& f : std::filesystem::directory_iterator(dir + "/train"))
      for (const auto& e : io::read_event_file(f.path().string()))
        for (const auto& v : e.values)
          if (v.tag == "batch_loss") steps.push_back(e.step);
    EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2, 3, 4}));
    std::filesystem::remove_all(dir);
  }
}
