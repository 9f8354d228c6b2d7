// Kernel launches per step on a GPU (lockstep/tensor/kernel_launches.hpp): a replay of a captured
// step counts the kernels its capture recorded, so a captured train step counts what it runs on
// the device; the flagship MLP's captured step runs a fixed, small set of kernels (the list is
// printed: what fusing kernels cuts). CI runs them on emulated GPUs, which count as real ones.
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/core/step_state.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops_update_all.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/host_copy.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;
using detail::kernel_launches;

TEST(GpuKernelLaunches, AReplayCountsTheKernelsItsCaptureRecorded) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Tensor a = test::random_uniform({16, 16}, 1).to(on.gpu);
  (void)relu(matmul(a, a)).to_vector<float>();  // warm-up
  Tensor out;
  const std::uint64_t before = kernel_launches(on.gpu), gemms = kernel_launches(on.gpu, "gemm");
  StepGraph graph(*on.ctx, [&] { out = relu(matmul(a, a)); });
  const std::uint64_t captured = kernel_launches(on.gpu) - before;
  EXPECT_GE(captured, 2u);
  graph.replay();
  graph.replay();
  EXPECT_EQ(kernel_launches(on.gpu) - before, 3 * captured) << detail::kernel_launches_by_kernel(on.gpu);
  EXPECT_EQ(kernel_launches(on.gpu, "gemm") - gemms, 3u);
}

// Adam over several variables in one launch (ops_update_all.hpp), captured: each replay gives
// the bits the one-variable updates give eagerly, and counts one launch.
TEST(GpuKernelLaunches, AdamOverSeveralVariablesReplaysTheOneVariableUpdatesBitsInOneLaunch) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  std::vector<Tensor> w, m, v, g, w1, m1, v1;
  for (std::uint64_t i = 0; i < 3; ++i) {
    const Shape s{1 + 50 * static_cast<std::int64_t>(i)};
    w.push_back(test::random_uniform(s, 10 * i + 1).to(on.gpu));
    m.push_back(test::random_uniform(s, 10 * i + 2, -0.1f, 0.1f).to(on.gpu));
    v.push_back(test::random_uniform(s, 10 * i + 3, 0.0f, 0.01f).to(on.gpu));
    g.push_back(test::random_uniform(s, 10 * i + 4).to(on.gpu));
    w1.push_back(w.back().clone());
    m1.push_back(m.back().clone());
    v1.push_back(v.back().clone());
  }
  step_state::StepBlock host;
  host.scalars.alpha = 0.01f;
  host.scalars.decay = 1e-3f;
  Tensor block = Tensor::empty({step_state::kStepBlockFloats});
  block.copy_from_host(&host, sizeof host);
  const AdamBetas betas{.one_minus_beta_1 = 0.1f, .one_minus_beta_2 = 0.001f, .epsilon = 1e-7f};
  StepGraph graph(*on.ctx, [&] { adam_update_all_(w, m, v, g, block, betas); });
  for (int round = 0; round < 3; ++round) {
    const std::uint64_t multi = kernel_launches(on.gpu, "adam_update_multi");
    graph.replay();
    EXPECT_EQ(kernel_launches(on.gpu, "adam_update_multi") - multi, 1u);
    for (std::size_t i = 0; i < w.size(); ++i) adam_update_(w1[i], m1[i], v1[i], g[i], block, betas);
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(w[i].to_vector<float>(), w1[i].to_vector<float>()) << "round " << round << " variable " << i;
      EXPECT_EQ(v[i].to_vector<float>(), v1[i].to_vector<float>()) << "round " << round << " variable " << i;
    }
  }
}

// RMSprop over several variables in one launch, captured, in each of its forms (plain, momentum,
// centered, both: one to three slots a variable): each replay gives the bits the one-variable
// updates give eagerly, and counts one launch.
TEST(GpuKernelLaunches, RmspropOverSeveralVariablesReplaysTheOneVariableUpdatesBitsInEveryForm) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  for (const float momentum : {0.0f, 0.5f})
    for (const bool centered : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "momentum " << momentum << " centered " << centered);
      std::vector<Tensor> w, vel, mom, avg, g, w1, vel1, mom1, avg1;
      for (std::uint64_t i = 0; i < 3; ++i) {
        const Shape s{1 + 50 * static_cast<std::int64_t>(i)};
        w.push_back(test::random_uniform(s, 10 * i + 1).to(on.gpu));
        vel.push_back(test::random_uniform(s, 10 * i + 2, 0.0f, 0.01f).to(on.gpu));
        g.push_back(test::random_uniform(s, 10 * i + 3).to(on.gpu));
        w1.push_back(w.back().clone());
        vel1.push_back(vel.back().clone());
        if (momentum > 0) {
          mom.push_back(test::random_uniform(s, 10 * i + 4, -0.1f, 0.1f).to(on.gpu));
          mom1.push_back(mom.back().clone());
        }
        if (centered) {
          avg.push_back(test::random_uniform(s, 10 * i + 5, -0.01f, 0.01f).to(on.gpu));
          avg1.push_back(avg.back().clone());
        }
      }
      step_state::StepBlock host;
      host.scalars.lr = 0.01f;
      Tensor block = Tensor::empty({step_state::kStepBlockFloats});
      block.copy_from_host(&host, sizeof host);
      const RmspropConstants c{.rho = 0.9f, .one_minus_rho = 0.1f, .epsilon = 1e-7f, .momentum = momentum};
      StepGraph graph(*on.ctx, [&] { rmsprop_update_all_(w, vel, mom, avg, g, block, c); });
      for (int round = 0; round < 3; ++round) {
        const std::uint64_t multi = kernel_launches(on.gpu, "rmsprop_update_multi");
        graph.replay();
        EXPECT_EQ(kernel_launches(on.gpu, "rmsprop_update_multi") - multi, 1u);
        for (std::size_t i = 0; i < w.size(); ++i) {
          Tensor m = momentum > 0 ? mom1[i] : Tensor(), a = centered ? avg1[i] : Tensor();
          rmsprop_update_(w1[i], vel1[i], m, a, g[i], block, c);
        }
        const auto expect_same = [&](const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                     const char* what) {
          ASSERT_EQ(got.size(), want.size()) << what;
          for (std::size_t i = 0; i < got.size(); ++i)
            EXPECT_EQ(got[i].to_vector<float>(), want[i].to_vector<float>())
                << what << ", round " << round << ", variable " << i;
        };
        expect_same(w, w1, "weights");
        expect_same(vel, vel1, "velocity");
        expect_same(mom, mom1, "momentum");  // (empty without momentum)
        expect_same(avg, avg1, "average gradient");
      }
    }
}

namespace {
// kSequentialFromInput: an Input layer first, as a Functional model's layers begin (the layers'
// seeds are the model's mixed with their index, so the two then draw the same weights and masks).
enum class Api { kSequential, kSequentialFromInput, kFunctional };
struct Flagship {
  std::unique_ptr<distribute::OneDeviceStrategy> strategy =
      std::make_unique<distribute::OneDeviceStrategy>("gpu:0");
  std::unique_ptr<Model> model;
  Tensor x, y;
  explicit Flagship(Api api = Api::kSequential) {
    {
      auto scope = strategy->scope();
      set_random_seed(1);
      if (api == Api::kSequential) {
        model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
            layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
      } else if (api == Api::kSequentialFromInput) {
        model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
            layers::Input({784}), layers::Dense(128, "relu"), layers::Dropout(0.2), layers::Dense(10, "softmax")});
      } else {
        const KerasTensor in = Input({784});
        KerasTensor h = call(layers::Dense(128, "relu"), in);
        h = call(layers::Dropout(0.2), h);
        model = std::make_unique<Functional>(in, call(layers::Dense(10, "softmax"), h));
      }
      model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    }
    const ComputeScope on(strategy->context(0));
    x = test::random_uniform({64, 784}, 2).to(Device{DeviceKind::kCuda, 0});
    std::vector<std::int64_t> labels(64);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
    // As the input path copies them: the host's bytes kept beside, so the labels are checked on
    // the host and the step can be captured.
    const Tensor host = Tensor::from_vector(labels, {64}).to(Device{});
    y = host.to(Device{DeviceKind::kCuda, 0});
    detail::remember_host_copy(y, host);
  }
};

// Three captured train steps (jit_compile's default) after three warm-up ones; then one more,
// counted kernel by kernel. Returns the kernels of a step and those by name ("name n, ...").
struct StepKernels {
  std::uint64_t per_step = 0;
  std::map<std::string, std::uint64_t> by_name;
  std::string list;
};
StepKernels captured_step_kernels(Flagship& f) {
  const Device gpu{DeviceKind::kCuda, 0};
  for (int i = 0; i < 3; ++i) (void)f.model->train_step(f.x, f.y);
  StepKernels out;
  const std::uint64_t checks = kernel_launches(gpu, "first_outside");
  for (int i = 0; i < 3; ++i) {
    const std::uint64_t before = kernel_launches(gpu);
    (void)f.model->train_step(f.x, f.y);
    const std::uint64_t n = kernel_launches(gpu) - before;
    if (i > 0) {
      EXPECT_EQ(n, out.per_step);
    }
    out.per_step = n;
  }
  EXPECT_EQ(kernel_launches(gpu, "first_outside"), checks)
      << "not captured: the labels were checked on the device";
  std::vector<std::uint64_t> before;
  for (int k = 0; k < static_cast<int>(backend::KernelOp::kCount); ++k)
    before.push_back(kernel_launches(gpu, backend::kernel_op_name(static_cast<backend::KernelOp>(k))));
  (void)f.model->train_step(f.x, f.y);
  for (int k = 0; k < static_cast<int>(backend::KernelOp::kCount); ++k) {
    const char* name = backend::kernel_op_name(static_cast<backend::KernelOp>(k));
    if (const std::uint64_t n = kernel_launches(gpu, name) - before[static_cast<std::size_t>(k)]) {
      out.list += std::string(out.list.empty() ? "" : ", ") + name + " " + std::to_string(n);
      out.by_name[name] = n;
    }
  }
  return out;
}
}  // namespace

// The flagship's train step, captured (jit_compile's default): the same kernels every step.
TEST(GpuKernelLaunches, TheFlagshipsCapturedTrainStepRunsTheSameKernelsEachStep) {
  LOCKSTEP_REQUIRE_GPU();
  Flagship f;
  StepKernels k = captured_step_kernels(f);
  auto& step = k.by_name;
  const std::string& list = k.list;
  // Adam updates the four variables in one launch.
  EXPECT_EQ(step["adam_update_multi"], 1u) << list;
  EXPECT_EQ(step["adam_update"], 0u) << list;
  // The output's softmax is computed with the loss.
  EXPECT_EQ(step["softmax_sparse_xent"], 1u) << list;
  EXPECT_EQ(step["softmax"] + step["sparse_softmax_xent"], 0u) << list;
  // The hidden Dense layer's ReLU backward and bias gradient: one op.
  EXPECT_EQ(step["relu_backward_bias_grad"], 1u) << list;
  EXPECT_EQ(step["unary_backward"], 0u) << list;
  // Each Dense layer's product with its bias (and the hidden one's ReLU): one op, cuBLASLt's
  // epilogue on CUDA; the GEMMs left are the backward's.
  EXPECT_EQ(step["gemm_bias_activation"], 2u) << list;
  // The step's numbers: one kernel at its start, which also ends the step before (no step_end).
  EXPECT_EQ(step["step_begin"], 1u) << list;
  // gemm 3, gemm_bias_activation 2, binary 1, reduce_sum 2, relu_backward_bias_grad 1, dropout 1,
  // accuracy_state 1, softmax_sparse_xent 1 + backward 1, adam_update_multi 1, step_begin 1,
  // loss_seed 1.
  EXPECT_EQ(k.per_step, 16u) << list;
  std::printf("flagship, batch 64: %llu kernels per captured train step: %s\n",
              static_cast<unsigned long long>(k.per_step), list.c_str());
}

// The flagship written with the functional API: its softmax output is fused with the loss as the
// Sequential's is (the same kernels), and its weights after a few steps are the Sequential's bits.
TEST(GpuKernelLaunches, TheFunctionalFlagshipRunsTheSequentialsKernelsAndGetsItsWeights) {
  LOCKSTEP_REQUIRE_GPU();
  Flagship seq(Api::kSequentialFromInput), fun(Api::kFunctional);
  const StepKernels ks = captured_step_kernels(seq), kf = captured_step_kernels(fun);
  EXPECT_EQ(kf.per_step, ks.per_step) << "functional: " << kf.list << "\nsequential: " << ks.list;
  EXPECT_EQ(kf.list, ks.list);
  EXPECT_EQ(kf.by_name.count("softmax"), 0u) << kf.list;
  const std::vector<Variable> vs = seq.model->variables(), vf = fun.model->variables();
  ASSERT_EQ(vs.size(), vf.size());
  for (std::size_t i = 0; i < vs.size(); ++i)
    EXPECT_TRUE(vs[i].value().to(Device{}).bitwise_equal(vf[i].value().to(Device{}))) << vs[i].name();
}

namespace {
// A Functional model of two outputs on gpu:0: "cls" (10 classes, softmax, sparse cross-entropy,
// accuracy) and "reg" (one value, mse). With `echo`, a third output reads "cls" (weighted 0), so
// "cls" keeps its probabilities: the unfused reference, the same weights and numbers.
struct TwoHeads {
  std::unique_ptr<distribute::OneDeviceStrategy> strategy =
      std::make_unique<distribute::OneDeviceStrategy>("gpu:0");
  std::unique_ptr<Functional> model;
  explicit TwoHeads(bool echo) {
    auto scope = strategy->scope();
    set_random_seed(1);
    const auto named = [](layers::LayerPtr l, const char* name) {
      l->set_name(name);
      return l;
    };
    const KerasTensor in = Input({784});
    const KerasTensor h = call(layers::Dense(128, "relu"), in);
    const KerasTensor cls = call(named(layers::Dense(10, "softmax"), "cls"), h);
    const KerasTensor reg = call(named(layers::Dense(1), "reg"), h);
    std::map<std::string, losses::LossPtr> loss{{"cls", losses::SparseCategoricalCrossentropy()},
                                                {"reg", losses::MeanSquaredError()}};
    std::map<std::string, double> weights;
    if (echo) {
      model = std::make_unique<Functional>(
          in, std::vector<KerasTensor>{cls, reg, call(named(layers::Activation("linear"), "echo"), cls)}, "echo", 3);
      loss["echo"] = losses::MeanSquaredError();
      weights["echo"] = 0.0;
    } else {
      model = std::make_unique<Functional>(in, std::vector<KerasTensor>{cls, reg}, "two_heads", 3);
    }
    model->compile(optimizers::Adam(1e-3), loss, {{"cls", {"accuracy"}}}, weights);
  }
  // fit for 6 steps of 64 (captured after the first, jit_compile's default): the last step's
  // kernels, counted at each step's end.
  StepKernels fit_last_step() {
    const Device gpu{DeviceKind::kCuda, 0};
    const std::int64_t n = 6 * 64;
    std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
    std::vector<Tensor> ys{Tensor::from_vector(labels, {n}), test::random_uniform({n, 1}, 3)};
    if (model->output_structure().size() == 3) ys.push_back(Tensor::zeros({n, 10}));
    std::vector<std::vector<std::uint64_t>> at_end;  // per step: the total, then per kernel op
    const auto count = std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_train_batch_end = [&](std::int64_t, const Logs&) {
          std::vector<std::uint64_t> n_now{kernel_launches(gpu)};
          for (int k = 0; k < static_cast<int>(backend::KernelOp::kCount); ++k)
            n_now.push_back(kernel_launches(gpu, backend::kernel_op_name(static_cast<backend::KernelOp>(k))));
          at_end.push_back(std::move(n_now));
        }});
    model->fit({test::random_uniform({n, 784}, 2)}, ys,
               {.batch_size = 64, .shuffle = false, .verbose = 0, .callbacks = {count}});
    StepKernels out;
    if (at_end.size() != 6u) {
      ADD_FAILURE() << at_end.size() << " steps";
      return out;
    }
    const auto& last = at_end[5];
    const auto& before = at_end[4];
    out.per_step = last[0] - before[0];
    for (int k = 0; k < static_cast<int>(backend::KernelOp::kCount); ++k) {
      const char* name = backend::kernel_op_name(static_cast<backend::KernelOp>(k));
      if (const std::uint64_t d = last[static_cast<std::size_t>(k) + 1] - before[static_cast<std::size_t>(k) + 1]) {
        out.list += std::string(out.list.empty() ? "" : ", ") + name + " " + std::to_string(d);
        out.by_name[name] = d;
      }
    }
    return out;
  }
};
}  // namespace

// Each softmax output of a Functional model that no layer reads is computed with its sparse
// cross-entropy, as a model of one output's is: softmax_sparse_xent where softmax and
// sparse_softmax_xent ran (one kernel fewer per output and step). An output another layer reads
// keeps its softmax; the weights after fit are the same bits either way.
TEST(GpuKernelLaunches, ASoftmaxOutputOfAFunctionalModelOfTwoOutputsRunsOneKernelWithItsLoss) {
  LOCKSTEP_REQUIRE_GPU();
  TwoHeads fused(false), unfused(true);
  StepKernels kf = fused.fit_last_step(), ku = unfused.fit_last_step();
  EXPECT_EQ(fused.model->jit_compile_reason(), "");  // captured
  EXPECT_EQ(kf.by_name["softmax_sparse_xent"], 1u) << kf.list;
  EXPECT_EQ(kf.by_name["softmax"] + kf.by_name["sparse_softmax_xent"], 0u) << kf.list;
  EXPECT_EQ(kf.by_name["sparse_softmax_xent_backward"], 1u) << kf.list;
  EXPECT_EQ(ku.by_name["softmax_sparse_xent"], 0u) << ku.list;
  EXPECT_EQ(ku.by_name["softmax"], 1u) << ku.list;
  EXPECT_EQ(ku.by_name["sparse_softmax_xent"], 1u) << ku.list;
  // Each output's per-example losses seeded with its weight, one kernel each, and no op adding
  // them up: no seed of ones (fill), no weighted total and no scale of it, nor their backward.
  EXPECT_EQ(kf.by_name["loss_seed"], 2u) << kf.list;
  EXPECT_EQ(kf.by_name["fill"], 0u) << kf.list;
  // gemm 5, gemm_bias_activation 3, unary 2, unary_backward 1, binary 3, reduce_sum 5,
  // relu_backward_bias_grad 1, accuracy_state 1, softmax_sparse_xent 1 + backward 1,
  // adam_update_multi 1, step_begin 1, loss_seed 2 (35 with the outputs' sums added up and
  // scaled, and differentiated from ones; 36 with "cls"'s softmax and loss apart too; 29 while
  // the mean squared error's mean differentiated as x * 0 + g, a unary kernel more; 28 while its
  // difference's backward also negated the gradient for the targets, which take none).
  EXPECT_EQ(kf.per_step, 27u) << kf.list;
  const std::vector<Variable> vf = fused.model->variables(), vu = unfused.model->variables();
  ASSERT_EQ(vf.size(), vu.size());
  for (std::size_t i = 0; i < vf.size(); ++i)
    EXPECT_TRUE(vf[i].value().to(Device{}).bitwise_equal(vu[i].value().to(Device{}))) << vf[i].name();
  std::printf("two outputs, batch 64: %llu kernels per step of fit (captured): %s\n",
              static_cast<unsigned long long>(kf.per_step), kf.list.c_str());
}
