// The one input path to GPUs (DistributedBatch): rows leave the host as their source tensors
// store them (uint8 pixels stay uint8) and the pipeline's cast_and_scale is done on the device,
// same rule, same bits; fit and custom loops (experimental_distribute_dataset) read this way;
// DeviceUpload into a caller's buffers (a captured step's fixed inputs) names a batch that does
// not fit them; rows are gathered straight into the staging blocks their copy reads, the same
// bits with one host copy fewer; a batch's components share one block and one copy. CI runs them
// on emulated GPUs.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/emulated_gpu.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/device_upload.hpp"
#include "tensor/host_copy.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

constexpr float kScale = 1.0f / 255.0f;
const Device kGpu0{DeviceKind::kCuda, 0};

// n examples of 20 uint8 pixels, labelled by which of the first five is largest.
struct Pixels {
  Tensor x, y;
};
Pixels make_pixels(std::int64_t n) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(n * 20));
  std::uint32_t state = 12345;
  for (auto& p : px) {
    state = state * 1664525u + 1013904223u;
    p = static_cast<std::uint8_t>(state >> 24);
  }
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto first = px.begin() + static_cast<std::ptrdiff_t>(i * 20);
    labels[i] = std::max_element(first, first + 5) - first;
  }
  return {Tensor::from_vector(px, {n, 20}), Tensor::from_vector(labels, {n})};
}

// fit on `devices` for two epochs of 64-example batches; the pixels reach the model cast and
// scaled by the pipeline (cast on the device, from the bytes) or as floats scaled beforehand.
std::vector<std::vector<float>> fit_weights(const std::vector<std::string>& devices, bool pipeline_casts,
                                            bool prefetch, bool gather_ahead = true) {
  const Pixels d = make_pixels(600);
  MirroredStrategy strategy({.devices = devices});
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    set_random_seed(7);
    model = std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(16, "relu", 20), layers::Dense(5, "softmax")});
    model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {});
  }
  const data::Dataset source = pipeline_casts
                                   ? data::Dataset::from_tensor_slices(d.x, d.y).cast_and_scale(kScale)
                                   : data::Dataset::from_tensor_slices(cast_and_scale(d.x, kScale), d.y);
  // 600 = 9 batches of 64 and one of 24, split over the replicas.
  model->fit(source.shuffle(600, 3).batch(64), {.epochs = 2, .verbose = 0, .gather_ahead = gather_ahead, .prefetch_to_device = prefetch});
  std::vector<std::vector<float>> w;
  for (const auto& v : model->variables()) w.push_back(v.value().to_vector<float>());
  return w;
}

}  // namespace

TEST(GpuInput, PixelsCastOnTheDeviceTrainTheSameWeightsAsFloatsFromTheHost) {
  LOCKSTEP_REQUIRE_GPU();
  for (const std::vector<std::string>& devices : {std::vector<std::string>{"gpu:0"}, {"gpu:0x2"}}) {
    SCOPED_TRACE(devices.back());
    const auto floats = fit_weights(devices, false, true);
    EXPECT_EQ(fit_weights(devices, true, true), floats) << "bytes cast on the device, copied ahead";
    EXPECT_EQ(fit_weights(devices, true, true, false), floats)
        << "bytes cast on the device, copied ahead, gathered by the replicas (not the input worker)";
    EXPECT_EQ(fit_weights(devices, true, false), floats) << "bytes cast on the device, copied in order";
  }
}

// Rows gathered straight into the staging blocks that the copy ahead reads (the default), or
// into host memory and then copied into them: the same weights, on one GPU and on 2 and 4
// logical replicas, from uint8 pixels cast on the device or from floats, through the input worker
// (slices of 256 KB and over) and the replicas' threads; 600 examples in batches of 256
// (shuffled, a short last batch of 88). Each slice copied ahead costs the host one copy into a
// staging block fewer: its labels' (integers, kept on the host for the label check) remain.
TEST(GpuInput, RowsGatheredIntoStagingTrainTheSameWeightsWithOneHostCopyFewer) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  const std::int64_t n = 600, features = 1024;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(n * features));
  std::uint32_t state = 99;
  for (auto& p : px) {
    state = state * 1664525u + 1013904223u;
    p = static_cast<std::uint8_t>(state >> 24);
  }
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = px[i * static_cast<std::size_t>(features)] % 5;
  const Tensor x = Tensor::from_vector(px, {n, features}), y = Tensor::from_vector(labels, {n});
  struct Trained {
    std::vector<std::vector<float>> weights;
    std::int64_t host_copies = 0, transfers = 0;  // into staging blocks; to the device (emulated GPUs)
  };
  const auto train = [&](const std::string& devices, bool pixels, bool staging, bool on_worker) {
    MirroredStrategy strategy({.devices = {devices}});
    std::unique_ptr<Sequential> model;
    {
      auto scope = strategy.scope();
      set_random_seed(5);
      model = std::make_unique<Sequential>(
          std::vector<layers::LayerPtr>{layers::Dense(8, "relu", features), layers::Dense(5, "softmax")});
      model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {});
    }
    const data::Dataset source = pixels ? data::Dataset::from_tensor_slices(x, y).cast_and_scale(kScale)
                                        : data::Dataset::from_tensor_slices(cast_and_scale(x, kScale), y);
    const std::int64_t copies = emulated ? backend::emulated_staging_copies() : 0;
    const std::int64_t transfers = emulated ? backend::emulated_copies_beside() : 0;
    model->fit(source.shuffle(n, 11).batch(256),
               {.epochs = 2, .verbose = 0, .gather_ahead = on_worker, .gather_into_staging = staging});
    Trained t;
    for (const auto& v : model->variables()) t.weights.push_back(v.value().to_vector<float>());
    t.host_copies = emulated ? backend::emulated_staging_copies() - copies : 0;
    t.transfers = emulated ? backend::emulated_copies_beside() - transfers : 0;
    return t;
  };
  for (const std::string devices : {"gpu:0", "gpu:0x2", "gpu:0x4"}) {
    for (bool on_worker : {true, false}) {
      SCOPED_TRACE(devices + (on_worker ? ", gathered on the input worker" : ", gathered by the replicas"));
      const Trained before = train(devices, false, false, on_worker);
      for (bool pixels : {false, true}) {
        SCOPED_TRACE(pixels ? "uint8 pixels" : "floats");
        const Trained on = train(devices, pixels, true, on_worker);
        EXPECT_EQ(on.weights, before.weights);
        EXPECT_EQ(train(devices, pixels, false, on_worker).weights, before.weights) << "gathered into host memory";
        // Off: each slice copied ahead is copied into its block twice by the host (its rows and
        // its labels); on: once (its labels). Either way the slice's rows and labels share the
        // block and one transfer to the device.
        if (emulated && !pixels) {
          EXPECT_GT(on.host_copies, 0);
          EXPECT_EQ(before.host_copies, 2 * on.host_copies);
          EXPECT_EQ(on.transfers, on.host_copies) << "one transfer per slice";
          EXPECT_EQ(before.transfers, on.transfers);
        }
      }
    }
  }
}

// A batch's components (rows, labels, sample weights) share one staging block, each at an aligned
// place, and one copy to the device: rows gathered into the block by the caller, the others
// copied there by the host. Their values arrive intact, each its own tensor, the labels' host
// bytes kept for the label check; the block is lent again for the next batch.
TEST(GpuInput, ABatchsComponentsShareOneStagingBlockAndOneCopyToTheDevice) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  const auto cpu = make_compute_context(Device{});
  OnGpu0 gpu;
  for (int round = 0; round < 3; ++round) {
    std::vector<float> xv(5 * 7), wv{0.5f, 1.0f, 2.0f, 0.25f, 1.5f};
    for (std::size_t k = 0; k < xv.size(); ++k) xv[k] = static_cast<float>(round * 100 + static_cast<int>(k)) / 3;
    const std::vector<std::int64_t> yv{round, 4, 0, 2, 1};
    Tensor y, w;
    {
      ComputeScope on_host(*cpu);  // labels and weights gathered in host memory
      y = Tensor::from_vector(yv, {5});
      w = Tensor::from_vector(wv, {5});
    }
    const std::int64_t copies = emulated ? backend::emulated_copies_beside() : 0;
    const std::int64_t fills = emulated ? backend::emulated_staging_copies() : 0;
    DeviceUpload up({Shape({5, 7}), y.shape(), w.shape()}, {DType::kF32, DType::kI64, DType::kF32});
    Tensor x = up.stage(0);
    ASSERT_TRUE(x.defined());
    const Tensor y_block = up.stage(1), w_block = up.stage(2);
    ASSERT_TRUE(y_block.defined() && w_block.defined()) << "each component has its place in the block";
    EXPECT_NE(y_block.raw_data(), x.raw_data());
    EXPECT_NE(w_block.raw_data(), y_block.raw_data());
    std::copy(xv.begin(), xv.end(), x.data<float>());
    up.start({x, y, w});
    const std::vector<Tensor> got = up.take();
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].to_vector<float>(), xv) << "round " << round;
    EXPECT_EQ(got[1].to_vector<std::int64_t>(), yv) << "round " << round;
    EXPECT_EQ(got[2].to_vector<float>(), wv) << "round " << round;
    for (const Tensor& t : got) EXPECT_EQ(t.device(), gpu.gpu);
    const std::shared_ptr<const void> labels = detail::host_copy_of(got[1]);
    ASSERT_NE(labels, nullptr) << "the labels' host bytes, for the label check on the host";
    EXPECT_EQ(static_cast<const std::int64_t*>(labels.get())[0], round);
    if (emulated) {
      EXPECT_EQ(backend::emulated_copies_beside() - copies, 1) << "one copy to the device for the batch";
      EXPECT_EQ(backend::emulated_staging_copies() - fills, 2) << "the labels and weights copied into the block";
    }
  }
}

// Where no block holds the whole batch, each component goes on its own, with the same values: a
// batch over a block's size (16 MiB) takes a block per component; with every block on loan, the
// components are copied as from the caller's memory.
TEST(GpuInput, ABatchNoBlockCanHoldGoesComponentByComponent) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  OnGpu0 gpu;
  const auto upload = [&](std::int64_t x_floats, std::int64_t y_floats, bool x_staged) {
    const std::int64_t copies = emulated ? backend::emulated_copies_beside() : 0;
    DeviceUpload up({Shape({x_floats}), Shape({y_floats})}, {DType::kF32, DType::kF32});
    Tensor x = up.stage(0);
    ASSERT_EQ(x.defined(), x_staged);
    std::vector<float> xv(static_cast<std::size_t>(x_floats)), yv(static_cast<std::size_t>(y_floats));
    for (std::size_t k = 0; k < xv.size(); k += 997) xv[k] = static_cast<float>(k);
    for (std::size_t k = 0; k < yv.size(); k += 991) yv[k] = -static_cast<float>(k);
    const auto cpu = make_compute_context(Device{});
    Tensor y;
    {
      ComputeScope on_host(*cpu);
      y = Tensor::from_vector(yv, {y_floats});
      if (!x_staged) x = Tensor::from_vector(xv, {x_floats});
    }
    if (x_staged) std::copy(xv.begin(), xv.end(), x.data<float>());
    up.start({x, y});
    const std::vector<Tensor> got = up.take();
    EXPECT_EQ(got[0].to_vector<float>(), xv);
    EXPECT_EQ(got[1].to_vector<float>(), yv);
    if (emulated) {
      EXPECT_EQ(backend::emulated_copies_beside() - copies, 2) << "a copy per component";
    }
  };
  {
    SCOPED_TRACE("12 MiB and 8 MiB: over a block's size together");
    upload(std::int64_t{3} << 20, std::int64_t{2} << 20, true);
  }
  if (!emulated) return;  // CUDA's pinned memory may be scarcer than the pool's capacity
  {
    SCOPED_TRACE("every block on loan");
    std::vector<DeviceUpload> holding;
    for (int k = 0; k < 4; ++k) {  // 4 blocks of 16 MiB: the pool's 64 MiB
      holding.emplace_back(std::vector<Shape>{Shape({std::int64_t{4} << 20})}, std::vector<DType>{DType::kF32});
      ASSERT_TRUE(holding.back().stage(0).defined()) << k;
    }
    upload(1000, 100, false);
  }
}

TEST(GpuInput, AStagedUploadHandsOutItsBlockAndCopiesFromItAsFromTheHost) {
  LOCKSTEP_REQUIRE_GPU();
  const std::vector<std::uint8_t> bytes{1, 2, 3, 4, 5, 6};
  {
    OnGpu0 gpu;
    for (int round = 0; round < 3; ++round) {  // blocks lent, copied from, lent again
      DeviceUpload up({Shape({2, 3}), Shape({0, 3})}, {DType::kU8, DType::kF32});
      Tensor block = up.stage(0);
      ASSERT_TRUE(block.defined());
      EXPECT_EQ(block.device().kind, DeviceKind::kCpu);
      EXPECT_EQ(block.shape(), Shape({2, 3}));
      EXPECT_EQ(block.dtype(), DType::kU8);
      EXPECT_EQ(up.stage(0).raw_data(), block.raw_data()) << "the same block, asked twice";
      EXPECT_FALSE(up.stage(1).defined()) << "no block for an empty tensor";
      std::copy(bytes.begin(), bytes.end(), static_cast<std::uint8_t*>(block.raw_data()));
      up.start({block, Tensor::wrap(nullptr, Shape({0, 3}), DType::kF32)});
      const std::vector<Tensor> got = up.take();
      EXPECT_EQ(got[0].device().kind, DeviceKind::kCuda);
      EXPECT_EQ(got[0].to_vector<std::uint8_t>(), bytes);
      const std::string err = message_of([&] { (void)up.stage(0); });
      EXPECT_TRUE(has(err, "DeviceUpload::stage: started already")) << err;
    }
    DeviceUpload unused({Shape({2, 3})}, {DType::kU8});  // a block lent and never copied: given back
    ASSERT_TRUE(unused.stage(0).defined());
  }
  const auto cpu = make_compute_context(Device{});
  ComputeScope on_cpu(*cpu);
  DeviceUpload up({Shape({2, 3})}, {DType::kU8});
  EXPECT_FALSE(up.stage(0).defined()) << "a CPU copies nothing: no block to fill";
}

// The host bytes kept beside uploaded integer batches (labels are checked on the host) go with
// their device copies: however many batches a fit uploads, only a few dead ones' bytes are kept
// (until a sweep, made as the kept ones double), and a live batch's are found among them.
TEST(GpuInput, TheHostBytesOfUploadedBatchesGoWithTheirDeviceCopies) {
  LOCKSTEP_REQUIRE_GPU();
  const auto cpu = make_compute_context(Device{});
  OnGpu0 gpu;
  const auto upload = [&cpu](std::int64_t label, std::weak_ptr<Storage>* host_storage) {
    Tensor host;
    {
      ComputeScope on_host(*cpu);  // a batch gathered in host memory
      host = Tensor::from_vector(std::vector<std::int64_t>{label, 1, 2, 3}, {4});
    }
    *host_storage = host.impl()->storage;
    DeviceUpload up({host.shape()}, {host.dtype()});
    up.start({host});
    return up.take()[0];
  };
  std::weak_ptr<Storage> live_host;
  const Tensor live = upload(7, &live_host);
  std::vector<std::weak_ptr<Storage>> dead(1000);
  for (std::size_t i = 0; i < dead.size(); ++i) (void)upload(static_cast<std::int64_t>(i), &dead[i]);
  const auto kept = std::count_if(dead.begin(), dead.end(), [](const auto& w) { return !w.expired(); });
  EXPECT_LE(kept, 32) << "the host bytes of batches whose device copies are gone are kept";
  const std::shared_ptr<const void> bytes = detail::host_copy_of(live);
  ASSERT_NE(bytes, nullptr) << "a live batch's host bytes were let go";
  EXPECT_EQ(*static_cast<const std::int64_t*>(bytes.get()), 7);
  EXPECT_FALSE(live_host.expired());
}

TEST(GpuInput, ACustomLoopGetsEachReplicasRowsCastOnItsDevice) {
  LOCKSTEP_REQUIRE_GPU();
  const Pixels d = make_pixels(40);
  const std::vector<float> want = cast_and_scale(d.x, kScale).to_vector<float>();  // on the host
  const std::vector<std::string> devices =
      gpus() >= 2 ? std::vector<std::string>{"gpu:0", "gpu:1"} : std::vector<std::string>{"gpu:0x2"};
  MirroredStrategy strategy({.devices = devices});
  auto dist = strategy.experimental_distribute_dataset(
      data::Dataset::from_tensor_slices(d.x, d.y).cast_and_scale(kScale).batch(10));
  auto it = dist.make_iterator();
  std::int64_t first_row = 0;
  int steps = 0;
  while (auto batch = it->next()) {
    const auto slices = strategy.run([&](const data::Element& xy) { return xy; }, *batch);
    ASSERT_EQ(slices.size(), 2u);
    for (std::size_t r = 0; r < slices.size(); ++r) {
      const Tensor& x = slices[r][0];
      EXPECT_EQ(x.device().kind, DeviceKind::kCuda) << "replica " << r;
      EXPECT_EQ(x.dtype(), DType::kF32) << "replica " << r;
      ASSERT_EQ(x.shape(), Shape({5, 20})) << "replica " << r;
      const std::vector<float> got = x.to_vector<float>();
      const auto from = want.begin() + (first_row + static_cast<std::int64_t>(r) * 5) * 20;
      EXPECT_EQ(got, std::vector<float>(from, from + 100)) << "step " << steps << ", replica " << r;
      EXPECT_EQ(slices[r][1].dtype(), DType::kI64);
    }
    first_row += 10;
    ++steps;
  }
  EXPECT_EQ(steps, 4);
}

TEST(GpuInput, RowsAreGatheredAsStoredInHostMemoryWhateverTheThreadComputesOn) {
  LOCKSTEP_REQUIRE_GPU();
  const Pixels d = make_pixels(8);
  auto rows = data::Dataset::from_tensor_slices(d.x, d.y).cast_and_scale(kScale).batch(8).make_row_batch_iterator();
  ASSERT_TRUE(rows);
  const auto b = rows->next();
  ASSERT_TRUE(b);
  const auto ctx = make_compute_context(kGpu0);
  ComputeScope scope(*ctx);
  const data::Element stored = b->gather_stored(2, 6);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].dtype(), DType::kU8);  // what travels: a quarter of the floats' bytes
  EXPECT_EQ(stored[0].device().kind, DeviceKind::kCpu);
  EXPECT_EQ(stored[0].shape(), Shape({4, 20}));
  EXPECT_EQ(stored[0].to_vector<std::uint8_t>(), d.x.slice(2, 6).to_vector<std::uint8_t>());
}

// The rows of an upload ahead, gathered by the input worker or by the replica's thread: the
// same bytes on the device, and a range outside the batch is the same error, raised where the
// replica starts the copy. A slice of 12,000 rows of 28 bytes: over the size the worker takes.
TEST(GpuInput, AnUploadAheadGathersTheSameRowsOnTheInputWorkerOrTheReplicasThread) {
  LOCKSTEP_REQUIRE_GPU();
  const std::int64_t n = 16384;
  const Pixels d = make_pixels(n);
  auto rows = data::Dataset::from_tensor_slices(d.x, d.y).cast_and_scale(kScale).shuffle(n, 4).batch(n)
                  .make_row_batch_iterator();
  ASSERT_TRUE(rows);
  const auto b = rows->next();
  ASSERT_TRUE(b);
  const std::vector<float> want = cast_and_scale(b->gather_stored(2, 12002)[0], kScale).to_vector<float>();
  const std::vector<std::int64_t> labels = b->gather_stored(2, 12002)[1].to_vector<std::int64_t>();
  const auto ctx = make_compute_context(kGpu0);
  ComputeScope scope(*ctx);
  for (bool on_worker : {true, false})
  for (bool staging : {true, false}) {
    SCOPED_TRACE(on_worker ? "input worker" : "replica's thread");
    SCOPED_TRACE(staging ? "into staging blocks" : "into host memory");
    const GlobalBatch global(*b, on_worker, staging);
    global.make_slots(1);
    global.reserve_upload(0, 2, 12002);
    global.start_upload(0);
    ASSERT_TRUE(global.uploaded(0));
    const data::Element got = global.part(2, 12002, 0);
    EXPECT_EQ(got[0].device().kind, DeviceKind::kCuda);
    EXPECT_EQ(got[0].to_vector<float>(), want);
    EXPECT_EQ(got[1].to_vector<std::int64_t>(), labels);
    global.reserve_upload(0, 5, n + 1);
    const std::string err = message_of([&] { global.start_upload(0); });
    EXPECT_TRUE(has(err, "RowBatch::gather_stored: rows [5, 16385) are outside the batch of 16384")) << err;
  }
}

TEST(GpuInput, AnUploadIntoBuffersTakesThemAndNamesABatchThatDoesNotFit) {
  LOCKSTEP_REQUIRE_GPU();
  const auto ctx = make_compute_context(kGpu0);
  const auto host = make_compute_context(Device{});
  Tensor pixels, floats, wide;
  {
    ComputeScope on_host(*host);
    pixels = Tensor::from_vector(std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    floats = Tensor::full({2, 3}, 1.0, DType::kF32);
    wide = Tensor::full({2, 4}, 1.0, DType::kU8);
  }
  ComputeScope scope(*ctx);
  const Tensor buffer = Tensor::empty({2, 3}, DType::kU8);
  for (int round = 0; round < 3; ++round) {  // the same buffers step after step
    DeviceUpload up({buffer});
    up.start({pixels});
    const std::vector<Tensor> got = up.take();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].raw_data(), buffer.raw_data());
    EXPECT_EQ(got[0].to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
  }
  std::string err = message_of([&] { DeviceUpload({buffer}).start({floats}); });
  EXPECT_TRUE(has(err, "tensor 0 is (2, 3) float32") && has(err, "reserved for (2, 3) uint8")) << err;
  err = message_of([&] { DeviceUpload({buffer}).start({wide}); });
  EXPECT_TRUE(has(err, "tensor 0 is (2, 4) uint8") && has(err, "reserved for (2, 3) uint8")) << err;
  err = message_of([&] { DeviceUpload({buffer}).start({pixels, pixels}); });
  EXPECT_TRUE(has(err, "2 tensors for 1 reserved")) << err;
  err = message_of([&] { DeviceUpload up({pixels}); });
  EXPECT_TRUE(has(err, "buffer 0 is on cpu:0 but this thread computes on gpu:0")) << err;
}

// An input path that copies a batch to the device every step makes each upload in the host
// memory of the one before (issue 37: fit's thread allocated it again every step). A DeviceUpload
// reserved again after take() copies the next batch, of other rows, with its own values and its
// labels' host bytes; one reserved again before its start gives what it reserved back first.
TEST(GpuInput, AnUploadReservedAgainCopiesTheNextBatch) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  const auto cpu = make_compute_context(Device{});
  OnGpu0 gpu;
  DeviceUpload up;
  for (std::int64_t round = 0; round < 3; ++round) {
    const std::int64_t rows = 3 + round;
    std::vector<float> xv(static_cast<std::size_t>(rows * 4));
    for (std::size_t k = 0; k < xv.size(); ++k) xv[k] = static_cast<float>(round * 100 + static_cast<int>(k)) / 3;
    std::vector<std::int64_t> yv(static_cast<std::size_t>(rows));
    for (std::size_t k = 0; k < yv.size(); ++k) yv[k] = round + static_cast<std::int64_t>(k);
    Tensor y;
    {
      ComputeScope on_host(*cpu);
      y = Tensor::from_vector(yv, {rows});
    }
    if (round == 2) up.reserve({Shape({1000})}, {DType::kF32});  // never started
    const std::int64_t copies = emulated ? backend::emulated_copies_beside() : 0;
    up.reserve({Shape({rows, 4}), y.shape()}, {DType::kF32, DType::kI64});
    EXPECT_FALSE(up.started());
    Tensor x = up.stage(0);
    ASSERT_TRUE(x.defined());
    EXPECT_EQ(x.shape(), Shape({rows, 4}));
    std::copy(xv.begin(), xv.end(), x.data<float>());
    up.start({x, y});
    const std::vector<Tensor> got = up.take();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].shape(), Shape({rows, 4})) << "round " << round;
    EXPECT_EQ(got[0].to_vector<float>(), xv) << "round " << round;
    EXPECT_EQ(got[1].to_vector<std::int64_t>(), yv) << "round " << round;
    const std::shared_ptr<const void> labels = detail::host_copy_of(got[1]);
    ASSERT_NE(labels, nullptr) << "the labels' host bytes, for the label check on the host";
    EXPECT_EQ(static_cast<const std::int64_t*>(labels.get())[0], round);
    if (emulated) {
      EXPECT_EQ(backend::emulated_copies_beside() - copies, 1) << "one copy to the device for the batch";
    }
  }
}

// fit's batch ahead reserves its upload in the memory of the one its batch before gave up
// (reserve_upload's `spent`): each batch gets its own rows, the batch before keeps the tensors it
// took, and an upload still reserved (not taken) is left to its batch.
TEST(GpuInput, ABatchAheadUploadsInTheSpentUploadOfTheBatchBefore) {
  LOCKSTEP_REQUIRE_GPU();
  const Pixels d = make_pixels(96);
  auto rows = data::Dataset::from_tensor_slices(d.x, d.y).cast_and_scale(kScale).batch(32).make_row_batch_iterator();
  ASSERT_TRUE(rows);
  std::vector<std::shared_ptr<const GlobalBatch>> batches;
  std::vector<std::vector<float>> want;
  for (int b = 0; b < 3; ++b) {
    const auto next = rows->next();
    ASSERT_TRUE(next);
    want.push_back(cast_and_scale(next->gather_stored(4, 20)[0], kScale).to_vector<float>());
    batches.push_back(std::make_shared<const GlobalBatch>(*next));
    batches.back()->make_slots(1);
  }
  OnGpu0 gpu;
  batches[0]->reserve_upload(0, 4, 20);
  batches[0]->start_upload(0);
  const data::Element first = batches[0]->part(4, 20, 0);
  EXPECT_FALSE(batches[0]->uploaded(0));
  batches[1]->reserve_upload(0, 4, 20, batches[0].get());
  batches[1]->start_upload(0);
  ASSERT_TRUE(batches[1]->uploaded(0));
  batches[2]->reserve_upload(0, 4, 20, batches[1].get());  // batch 1's upload is not spent
  batches[2]->start_upload(0);
  ASSERT_TRUE(batches[1]->uploaded(0));
  const data::Element second = batches[1]->part(4, 20, 0);
  const data::Element third = batches[2]->part(4, 20, 0);
  EXPECT_EQ(first[0].to_vector<float>(), want[0]);
  EXPECT_EQ(second[0].to_vector<float>(), want[1]);
  EXPECT_EQ(third[0].to_vector<float>(), want[2]);
  EXPECT_EQ(second[0].device(), gpu.gpu);
}

// Device memory that cannot be had for an upload (a batch larger than any device, refused before
// the system is asked: the sanitizers stop at such a request) is a ResourceError naming the
// tensors, and leaves nothing behind: no fence of the device's work (on CUDA an event out of its
// pool for good; emulated GPUs count them), and an upload reserved for nothing, which reserved
// again copies its batch.
TEST(GpuInput, AnUploadThatFindsNoDeviceMemoryLeavesNothingReserved) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  OnGpu0 gpu;
  const std::vector<Shape> too_large{Shape({std::int64_t{1} << 59, 2})};  // 4 EiB of float32
  const std::int64_t fences = emulated ? backend::emulated_fences_pending() : 0;
  std::string err = message_of([&] { DeviceUpload up(too_large, {DType::kF32}); });
  EXPECT_TRUE(has(err, "Tensor::empty")) << err;
  if (emulated) {
    EXPECT_EQ(backend::emulated_fences_pending(), fences) << "the constructor's fence";
  }
  DeviceUpload up;
  up.reserve({Shape({2, 4})}, {DType::kF32});
  err = message_of([&] { up.reserve(too_large, {DType::kF32}); });
  EXPECT_TRUE(has(err, "Tensor::empty")) << err;
  if (emulated) {
    EXPECT_EQ(backend::emulated_fences_pending(), fences) << "reserve's fence, the one before's";
  }
  EXPECT_FALSE(up.started());
  err = message_of([&] { up.stage(0); });
  EXPECT_TRUE(has(err, "no tensor 0")) << err;
  up.reserve({Shape({2, 4})}, {DType::kF32});
  const std::vector<float> xv{1, 2, 3, 4, 5, 6, 7, 8};
  Tensor x = up.stage(0);
  ASSERT_TRUE(x.defined());
  std::copy(xv.begin(), xv.end(), x.data<float>());
  up.start({x});
  EXPECT_EQ(up.take()[0].to_vector<float>(), xv);
  if (emulated) {
    EXPECT_EQ(backend::emulated_fences_pending(), fences);
  }
}
