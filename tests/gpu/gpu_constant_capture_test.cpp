// The ops and layers that index or mask with constants built from host values (PositionEmbedding's
// first rows, RepeatVector's rows, the unfused attention's causal mask, zero padding's and
// concatenate's element positions) keep them on the device (device_constant): their train steps
// copy nothing from the host, so jit_compile captures them, on one replica and on logical replicas
// of one GPU, and the replays train the bits of eager steps. CI runs them on emulated GPUs, which
// count their replays.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/emulated_gpu.hpp"
#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/attention.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

// Causal self-attention of one head through the unfused path (attention_reference: what
// MultiHeadAttention computes when its scores are asked for): [b, t, d] -> [b, t, d].
class CausalReferenceAttention final : public layers::Layer {
 public:
  CausalReferenceAttention() : Layer("causal_reference_attention") {}
  std::string class_name() const override { return "TestCausalReferenceAttention"; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext&) const override {
    const Tensor heads = reshape(x, {x.dim(0), x.dim(1), 1, x.dim(2)});
    return reshape(attention_reference(heads, heads, heads, {}, {.causal = true, .heads_last = true}),
                   x.shape());
  }
};

struct Case {
  std::string name;
  Shape example;                                 // one input example's shape
  std::function<std::unique_ptr<Model>()> make;  // compiled
};

// Four regression outputs of `features`, trained on the mean squared error.
std::unique_ptr<Model> functional(const KerasTensor& in, const KerasTensor& features) {
  auto m =
      std::make_unique<Functional>(in, call(layers::Dense(4), call(layers::Flatten(), features)), "model", 3);
  m->compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  return m;
}

std::vector<Case> cases() {
  return {
      {"PositionEmbedding of 6 of its 10 positions", Shape{6, 8},
       [] {
         const KerasTensor in = Input({6, 8});
         const KerasTensor x = call(layers::Dense(8), in);
         return functional(in, call(layers::Add(), {x, call(layers::PositionEmbedding(10), x)}));
       }},
      {"RepeatVector", Shape{12},
       [] {
         const KerasTensor in = Input({12});
         return functional(in, call(layers::RepeatVector(3), call(layers::Dense(5, "tanh"), in)));
       }},
      {"causal attention, unfused", Shape{6, 8},
       [] {
         const KerasTensor in = Input({6, 8});
         return functional(in,
                           call(std::make_shared<CausalReferenceAttention>(), call(layers::Dense(8), in)));
       }},
      {"ZeroPadding2D", Shape{4, 4, 2},
       [] {
         const KerasTensor in = Input({4, 4, 2});
         return functional(in, call(layers::Conv2D({.filters = 3, .kernel_size = {3, 3}}),
                                    call(layers::ZeroPadding2D(), in)));
       }},
      {"UpSampling2D nearest and bilinear, Cropping2D", Shape{3, 4, 2},
       [] {
         const KerasTensor in = Input({3, 4, 2});
         const KerasTensor up =
             call(layers::Concatenate(),
                  {call(layers::UpSampling2D(), in), call(layers::UpSampling2D({2, 2}, "bilinear"), in)});
         return functional(in, call(layers::Conv2D({.filters = 3, .kernel_size = {3, 3}}),
                                    call(layers::Cropping2D({layers::Pair{1, 0}, layers::Pair{0, 2}}), up)));
       }},
      {"UpSampling1D", Shape{5, 3},
       [] {
         const KerasTensor in = Input({5, 3});
         return functional(in, call(layers::UpSampling1D(3), call(layers::Dense(4, "tanh"), in)));
       }},
      {"Concatenate", Shape{12},
       [] {
         const KerasTensor in = Input({12});
         return functional(in, call(layers::Concatenate(),
                                    {call(layers::Dense(5, "relu"), in), call(layers::Dense(3), in)}));
       }},
  };
}

struct Trained {
  std::vector<Tensor> weights;  // on the host
  std::string reason;           // jit_compile's: empty when the train step was captured
  std::int64_t replays = 0;     // graphs replayed on emulated GPUs
};

// 5 batches of 8 and a short one of 3: a signature of its own, captured without an eager step
// before it, whose constants are the first rows of those the first step built.
constexpr std::int64_t kExamples = 8 * 5 + 3, kSteps = 6;

// The model `make` builds and compiles, fit on x and y at batch 8.
Trained train(const std::function<std::unique_ptr<Model>()>& make, const Tensor& x, const Tensor& y,
              JitCompile mode, const std::string& devices) {
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(5);
  auto model = make();
  model->set_jit_compile(mode);
  Trained t;
  const std::int64_t replays = backend::emulated_replays().graphs;
  ::testing::internal::CaptureStderr();
  try {
    model->fit(x, y, {.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0});
  } catch (...) {
    (void)::testing::internal::GetCapturedStderr();  // the capture ends: the next test may open one
    throw;
  }
  (void)::testing::internal::GetCapturedStderr();
  t.replays = backend::emulated_replays().graphs - replays;
  t.reason = model->jit_compile_reason();
  for (const auto& v : model->variables())
    t.weights.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
  return t;
}

void expect_captured_with_the_bits_of_eager_steps(const Trained& captured, const Trained& eager) {
  EXPECT_EQ(captured.reason, "");
  if (backend::device_kind(DeviceKind::kCuda).emulated()) {
    EXPECT_EQ(captured.replays, kSteps - 1);
  }
  EXPECT_EQ(eager.replays, 0);
  ASSERT_EQ(captured.weights.size(), eager.weights.size());
  for (std::size_t i = 0; i < eager.weights.size(); ++i)
    EXPECT_TRUE(captured.weights[i].bitwise_equal(eager.weights[i])) << "weight " << i;
}

}  // namespace

// Each model's train step is captured (the first step checked eagerly, every later one replayed,
// the short last batch's from a graph of its own: the constants the first step built are found,
// not copied again) and trains the bits of eager steps.
TEST(GpuConstantCapture, StepsThatIndexOrMaskWithConstantsAreCapturedAndTrainTheBitsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Tensor y = test::random_uniform({kExamples, 4}, 12);
  for (const std::string devices : {"gpu:0", "gpu:0x2"}) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name + " on " + devices);
      std::vector<std::int64_t> dims{kExamples};
      for (auto d : c.example.dims()) dims.push_back(d);
      const Tensor x = test::random_uniform(Shape(dims), 11);
      const Trained captured = train(c.make, x, y, JitCompile::kAuto, devices);
      expect_captured_with_the_bits_of_eager_steps(captured, train(c.make, x, y, JitCompile::kOff, devices));
    }
  }
}

// A constant first asked for inside a capture (more rows than the eager steps built) cannot be
// copied from the host there: the capture fails naming it, and nothing is kept.
TEST(GpuConstantCapture, MoreRowsThanKeptFirstAskedForInsideACaptureFailItNamingTheConstant) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  OnGpu0 on;
  const auto rows = [](std::int64_t n) {
    return device_constant("test rows asked for in a capture", n, [](std::int64_t r) {
      std::vector<std::int64_t> v(static_cast<std::size_t>(r));
      for (std::int64_t i = 0; i < r; ++i) v[static_cast<std::size_t>(i)] = i;
      return Tensor::from_vector(v, {r});
    });
  };
  (void)rows(2);  // eagerly: kept
  const Tensor src = Tensor::ones({4, 3});
  Tensor out;
  StepGraph fewer(*on.ctx, [&] { out = gather_rows(src, rows(2)); });  // found: captured
  fewer.replay();
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(6, 1.0f));
  const std::uint64_t kept = device_constant_bytes(on.gpu);
  const std::string msg =
      message_of([&] { StepGraph more(*on.ctx, [&] { (void)gather_rows(src, rows(3)); }); });
  EXPECT_TRUE(
      has(msg,
          "device_constant 'test rows asked for in a capture': 3 rows on gpu:0 are first asked for inside "
          "a capture (2 kept)"))
      << msg;
  EXPECT_EQ(device_constant_bytes(on.gpu), kept);
  EXPECT_EQ(rows(3).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));  // eagerly: built
}
