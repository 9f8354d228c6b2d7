// GPU kernels beyond the parity table (tests/backend, which runs every op x dtype on CUDA when a
// GPU is visible): bit-identical dropout masks and 16-bit roundings across backends, gradients
// on the GPU. Skipped without a GPU.
#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "gpu_test_util.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/tensor/attention.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
const Device kGpu0{DeviceKind::kCuda, 0};

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.device().kind == DeviceKind::kCpu ? t : t.to(Device{});
  std::vector<std::uint8_t> b(h.nbytes());
  h.copy_to_host(b.data(), b.size());
  return b;
}
}  // namespace

TEST(GpuCompute, DropoutMasksAreBitIdenticalAcrossBackends) {
  LOCKSTEP_REQUIRE_GPU();
  const auto gpu = make_compute_context(kGpu0);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (float rate : {0.1f, 0.3f, 0.5f}) {
      const DropoutKey key{.seed = 42, .stream = 3, .step = 17, .first_example = 1000};
      const Tensor cpu = dropout(Tensor::ones({257, 129}, dt), rate, key);
      Tensor on_gpu;
      {
        ComputeScope scope(*gpu);
        on_gpu = dropout(Tensor::ones({257, 129}, dt), rate, key);
      }
      EXPECT_EQ(bytes_of(cpu), bytes_of(on_gpu)) << dtype_name(dt) << " rate " << rate;
    }
  }
}

// fit's train step keys dropout by its step block's count, which the kernels read in the GPU's
// memory: the same masks (dropout and attention's, forward and backward) as the host's step.
TEST(GpuCompute, DropoutAndAttentionReadTheStepFromTheGpusStepBlock) {
  LOCKSTEP_REQUIRE_GPU();
  const auto gpu = make_compute_context(kGpu0);
  ComputeScope scope(*gpu);
  Tensor block = step_block();
  set_step_count_(block, 17);
  const DropoutKey by_host{.seed = 42, .stream = 3, .step = 17, .first_example = 1000};
  DropoutKey by_block = by_host;
  by_block.step = 0;
  by_block.step_block = block;
  const Tensor ones = Tensor::ones({257, 129});
  EXPECT_EQ(bytes_of(dropout(ones, 0.3f, by_block)), bytes_of(dropout(ones, 0.3f, by_host)));
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(2 * 2 * 5 * 8);
  for (auto& x : v) x = u(rng);
  const Tensor q = Tensor::from_vector(v, {2, 2, 5, 8}).to(kGpu0);
  const auto run = [&](const DropoutKey& key) {
    const AttentionOptions o{.causal = true, .dropout_rate = 0.4f, .dropout_key = key};
    Tensor lse;
    const Tensor out = scaled_dot_product_attention(q, q, q, {}, o, &lse);
    const auto g = scaled_dot_product_attention_grad(q, q, q, {}, out, lse, out, o);
    return std::vector<std::vector<std::uint8_t>>{bytes_of(out), bytes_of(g[0]), bytes_of(g[1]), bytes_of(g[2])};
  };
  EXPECT_EQ(run(by_block), run(by_host));
  by_block.step_block = Tensor();
  EXPECT_NE(run(by_block), run(by_host));  // step 0: other masks
}

// The metrics compile takes by name compute on the batch's device what they do on the CPU.
TEST(GpuCompute, MetricsByNameGiveTheCpusNumbers) {
  LOCKSTEP_REQUIRE_GPU();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> scores(40 * 7), one_hot(40 * 7, 0.0f);
  for (auto& v : scores) v = u(rng);
  for (int r = 0; r < 40; ++r) one_hot[r * 7 + r % 7] = 1.0f;
  const Tensor pred = Tensor::from_vector(scores, {40, 7}), target = Tensor::from_vector(one_hot, {40, 7});
  for (const char* name : {"categorical_accuracy", "accuracy", "mse", "mae"}) {
    auto cpu = metrics::get(name, "categorical_crossentropy"), gpu = cpu->clone_empty();
    cpu->update_state(target, pred);
    {
      const OnGpu0 on;
      gpu->update_state(target.to(on.gpu), pred.to(on.gpu));
    }
    EXPECT_EQ(gpu->state()[1], cpu->state()[1]) << name;
    EXPECT_NEAR(gpu->result(), cpu->result(), 1e-6) << name;
  }
}

// The top-k and binary accuracies are composed of ops (metrics.cpp's in_top_k): on the GPU their
// batch states are the CPU's exactly, for ties with the k-th score, NaN and infinity rows and
// k >= classes.
TEST(GpuCompute, TopKAndBinaryAccuracyStatesAreTheCpusTiesAndNaNsIncluded) {
  LOCKSTEP_REQUIRE_GPU();
  const float nan = NAN, inf = INFINITY;
  const Tensor scores = Tensor::from_vector<float>({0.1f, 0.5f, 0.5f, 0.2f, 0.3f, 0.3f, 0.3f, 0.3f, 0.9f, 0.1f, 0.1f, 0.1f,
                                                    nan, 0.1f, 0.2f, 0.3f, 0.1f, 0.2f, nan, 0.3f, inf, 0.1f, 0.1f, 0.1f},
                                                   {6, 4});
  const Tensor ids = Tensor::from_vector<std::int64_t>({2, 3, 1, 3, 3, 0}, {6}), rows = one_hot(ids, 4);
  const Tensor bits = Tensor::from_vector<float>({1, 0, 1, 1, 0, 0}, {6, 1});
  const Tensor probs = Tensor::from_vector<float>({0.1f, 0.5f, 0.25f, nan, 0.9f, 0.2f}, {6, 1});
  for (std::int64_t k = 1; k <= 5; ++k) {
    const metrics::TopKCategoricalAccuracy top(k);
    const metrics::SparseTopKCategoricalAccuracy sparse(k);
    const auto cpu_top = top.batch_state(rows, scores).to_vector<float>();
    const auto cpu_sparse = sparse.batch_state(ids, scores).to_vector<float>();
    const OnGpu0 on;
    EXPECT_EQ(top.batch_state(rows.to(on.gpu), scores.to(on.gpu)).to(Device{}).to_vector<float>(), cpu_top) << k;
    EXPECT_EQ(sparse.batch_state(ids.to(on.gpu), scores.to(on.gpu)).to(Device{}).to_vector<float>(), cpu_sparse) << k;
  }
  const metrics::BinaryAccuracy binary("b", 0.25);
  const auto cpu_binary = binary.batch_state(bits, probs).to_vector<float>();
  const OnGpu0 on;
  EXPECT_EQ(binary.batch_state(bits.to(on.gpu), probs.to(on.gpu)).to(Device{}).to_vector<float>(), cpu_binary);
}

TEST(GpuCompute, HalfRoundingsAreBitIdenticalAcrossBackends) {
  LOCKSTEP_REQUIRE_GPU();
  std::mt19937 rng(3);
  std::vector<float> v;
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 4096; ++i) v.push_back(i % 3 ? u(rng) : u(rng) * 1e-7f);  // subnormal halves too
  const Tensor host = Tensor::from_vector(v, {4096});
  const auto gpu = make_compute_context(kGpu0);
  for (DType dt : {DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    const Tensor cpu = host.to(dt);
    Tensor g;
    {
      ComputeScope scope(*gpu);
      g = host.to(kGpu0).to(dt);
    }
    EXPECT_EQ(bytes_of(cpu), bytes_of(g)) << dtype_name(dt);
  }
}

TEST(GpuCompute, GradientsOnTheGpuPassGradcheck) {
  LOCKSTEP_REQUIRE_GPU();
  const auto gpu = make_compute_context(kGpu0);
  ComputeScope scope(*gpu);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto rand = [&](std::int64_t r, std::int64_t c) {
    std::vector<float> v(static_cast<std::size_t>(r * c));
    for (auto& x : v) x = u(rng);
    return Tensor::from_vector(v, {r, c});
  };
  const Tensor x = rand(6, 5), w = rand(5, 4), b = rand(1, 4);
  const Tensor labels = Tensor::from_vector<std::int64_t>({0, 3, 1, 2, 3, 0}, {6});
  const auto loss = [&](const std::vector<Tensor>& in) {
    const Tensor h = tanh(add(matmul(in[0], in[1]), in[2]));
    return sparse_softmax_cross_entropy_with_logits(labels, h);
  };
  const GradcheckResult r = gradcheck(loss, {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
  const auto soft = [](const std::vector<Tensor>& in) { return softmax(mul(in[0], in[0]), -1); };
  const GradcheckResult s = gradcheck(soft, {x});
  EXPECT_TRUE(s.ok) << s.message;
}

namespace {
// q, k and v of one batch entry and head, `t` rows of `d` (heads of 8192 floats and more).
std::array<Tensor, 3> wide_heads(std::int64_t t, std::int64_t d) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::array<Tensor, 3> out;
  for (Tensor& x : out) {
    std::vector<float> v(static_cast<std::size_t>(t * d));
    for (auto& e : v) e = u(rng);
    x = Tensor::from_vector(v, {1, 1, t, d});
  }
  return out;
}

void expect_near(const Tensor& gpu, const Tensor& cpu, const char* what) {
  const std::vector<float> g = gpu.to(Device{}).to_vector<float>(), c = cpu.to_vector<float>();
  ASSERT_EQ(g.size(), c.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], c[i], 1e-4f * (1.0f + std::fabs(c[i]))) << what << " element " << i;
}
}  // namespace

// Heads of 8192 floats: a block's queries, accumulators and tiles take 66 KB of shared memory,
// more than the 48 KB a kernel gets without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize):
// the forward and backward kernels launch and compute what the CPU does.
TEST(GpuCompute, AttentionOverHeadsWiderThan48KBOfSharedMemoryComputesWhatTheCpuDoes) {
  LOCKSTEP_REQUIRE_GPU();
  const auto [q, k, v] = wide_heads(3, 8192);
  const AttentionOptions o{.causal = true};
  Tensor lse;
  const Tensor out = scaled_dot_product_attention(q, k, v, {}, o, &lse);
  const auto g = scaled_dot_product_attention_grad(q, k, v, {}, out, lse, out, o);
  const auto gpu = make_compute_context(kGpu0);
  ComputeScope scope(*gpu);
  const Tensor qg = q.to(kGpu0), kg = k.to(kGpu0), vg = v.to(kGpu0);
  Tensor lse_g;
  const Tensor out_g = scaled_dot_product_attention(qg, kg, vg, {}, o, &lse_g);
  const auto g_g = scaled_dot_product_attention_grad(qg, kg, vg, {}, out_g, lse_g, out_g, o);
  expect_near(out_g, out, "out");
  expect_near(g_g[0], g[0], "dq");
  expect_near(g_g[1], g[1], "dk");
  expect_near(g_g[2], g[2], "dv");
}

// Heads past what a GPU's block can hold in shared memory (227 KB on Hopper): a ValueError naming
// their sizes, not a failed launch.
TEST(GpuCompute, AttentionOverHeadsTooWideForTheGpusSharedMemoryIsAValueErrorNamingThem) {
  LOCKSTEP_REQUIRE_REAL_GPU();
  const auto gpu = make_compute_context(kGpu0);
  ComputeScope scope(*gpu);
  const auto [q, k, v] = wide_heads(2, 32768);
  const Tensor qg = q.to(kGpu0), kg = k.to(kGpu0), vg = v.to(kGpu0);
  try {
    (void)scaled_dot_product_attention(qg, kg, vg);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(has(msg, "key size 32768 and value size 32768")) << msg;
    EXPECT_TRUE(has(msg, "bytes of shared memory per block")) << msg;
  }
}
