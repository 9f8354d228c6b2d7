// device_constant: a constant built from host values once per (device, key) and kept, found by
// every later call (from any thread) without a copy from the host, so a watching capture check is
// told nothing; fewer rows are a view of the kept ones, more are built again; past the budget kept
// per device, built by every call and named to the check.
#include "lockstep/tensor/device_constant.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/host_copy.hpp"

namespace lockstep {
namespace {

Device here() { return context_device(current_compute_context()); }

TEST(DeviceConstant, IsBuiltOnceByKeyAndFoundAfterwardsWithoutACopyTheCaptureCheckSees) {
  int builds = 0;
  const auto build = [&](std::int64_t rows) {
    ++builds;
    std::vector<std::int64_t> v(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) v[static_cast<std::size_t>(i)] = 4 + i;
    return Tensor::from_vector(v, Shape{rows});
  };
  const std::uint64_t kept_before = device_constant_bytes(here());
  StepCaptureCheck check;
  Tensor first, again;
  {
    const StepCaptureCheck::OnThisThread watched(&check);
    first = device_constant("test rows", 3, build);  // built: not watched (no replay repeats it)
    again = device_constant("test rows", 3, build);  // found
  }
  EXPECT_EQ(check.blocker(), "");
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(again.to_vector<std::int64_t>(), (std::vector<std::int64_t>{4, 5, 6}));
  EXPECT_EQ(device_constant_bytes(here()), kept_before + 3 * sizeof(std::int64_t));
  // Fewer rows: the first rows of the kept ones. More: built again and kept instead.
  EXPECT_EQ(device_constant("test rows", 2, build).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(device_constant("test rows", 5, build).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(device_constant("test rows", 4, build).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(device_constant_bytes(here()), kept_before + 8 * sizeof(std::int64_t));  // the replaced one stays
  // Another key is another constant.
  const Tensor other = device_constant("test rows (other)", 3, build);
  EXPECT_EQ(builds, 3);
  EXPECT_NE(other.id(), first.id());
  // The check is live: a copy from the host made by the step itself is named.
  {
    const StepCaptureCheck::OnThisThread watched(&check);
    (void)build(3);
  }
  EXPECT_NE(check.blocker().find("a copy of host memory into a (3,) tensor"), std::string::npos)
      << check.blocker();
}

// A key is its name and every parameter: one differing in a parameter, or asked for on another
// device, is another constant; the same key is found again, by this thread and by another.
TEST(DeviceConstant, KeysDifferingInAParameterOrDeviceAreDistinctAndTheSameKeyIsFoundAgain) {
  int builds = 0;
  const auto build = [&](std::int64_t rows) {
    ++builds;
    return Tensor::zeros(Shape{rows}, DType::kI64);
  };
  const Tensor a = device_constant({"test keyed", {1, 2}}, 2, build);
  const Tensor b = device_constant({"test keyed", {1, 3}}, 2, build);
  const Tensor c = device_constant({"test keyed", {1}}, 2, build);
  EXPECT_EQ(builds, 3);
  EXPECT_NE(a.id(), b.id());
  EXPECT_NE(a.id(), c.id());
  EXPECT_EQ(device_constant({"test keyed", {1, 2}}, 2, build).id(), a.id());
  std::uint64_t from_another_thread = 0;
  std::thread([&] { from_another_thread = device_constant({"test keyed", {1, 2}}, 2, build).id(); }).join();
  EXPECT_EQ(from_another_thread, a.id());
  EXPECT_EQ(builds, 3);
  const std::shared_ptr<ComputeContext> cpu1 = make_compute_context(Device{DeviceKind::kCpu, 1});
  {
    const ComputeScope on(*cpu1);
    EXPECT_NE(device_constant({"test keyed", {1, 2}}, 2, build).id(), a.id());
  }
  EXPECT_EQ(builds, 4);
  EXPECT_EQ(ConstantKey("test keyed", {1, 2}).str(), "test keyed (1, 2)");
}

TEST(DeviceConstant, ReplicaThreadsMeetingAtTheFirstCallShareOneBuild) {
  std::atomic<int> builds{0};
  std::vector<std::uint64_t> ids(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ids.size(); ++i)
    threads.emplace_back([&, i] {
      ids[i] = device_constant("test shared by threads", 2, [&](std::int64_t) {
                 builds.fetch_add(1);
                 return Tensor::from_vector(std::vector<float>{1, 0, 1, 1}, Shape{2, 2});
               }).id();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  for (const std::uint64_t id : ids) EXPECT_EQ(id, ids[0]);
}

TEST(DeviceConstant, OnePastTheBudgetIsBuiltByEveryCallAndNamedToTheCaptureCheck) {
  const std::uint64_t kept = device_constant_bytes(here());
  ASSERT_LE(kept, device_constant_budget());
  const std::int64_t too_many = static_cast<std::int64_t>(device_constant_budget() - kept) + 1;
  int builds = 0;
  const auto build = [&](std::int64_t rows) {
    ++builds;
    return Tensor::zeros(Shape{rows}, DType::kU8);
  };
  StepCaptureCheck check;
  {
    const StepCaptureCheck::OnThisThread watched(&check);
    (void)device_constant("test too large", too_many, build);
  }
  (void)device_constant("test too large", too_many, build);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(device_constant_bytes(here()), kept);
  const std::string b = check.blocker();
  EXPECT_NE(b.find("the constant 'test too large', past the 64 MiB kept per device"), std::string::npos) << b;
  // What fits is still kept.
  (void)device_constant("test small after too large", 2, build);
  EXPECT_EQ(device_constant_bytes(here()), kept + 2);
}

TEST(DeviceConstant, ABuilderThatMakesOtherThanTheRowsAskedForIsRefusedByName) {
  const auto message = [](const std::function<Tensor(std::int64_t)>& build) {
    try {
      (void)device_constant("test bad builder", 3, build);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([](std::int64_t) { return Tensor(); }),
            "device_constant 'test bad builder': the builder made no tensor, not 3 rows in host memory");
  const std::string rows = message([](std::int64_t) { return Tensor::zeros({2, 4}); });
  EXPECT_NE(rows.find("made a (2, 4) tensor on cpu"), std::string::npos) << rows;
}

// A builder that runs out of host memory (a layer asking for a huge index constant): a
// ResourceError naming the constant and its rows, not a bare std::bad_alloc; nothing is kept.
TEST(DeviceConstant, HostMemoryRunningOutInTheBuilderIsAResourceErrorNamingTheConstant) {
  const std::uint64_t kept_before = device_constant_bytes(here());
  try {
    (void)device_constant("test huge rows", std::int64_t{1} << 40, [](std::int64_t) -> Tensor {
      throw std::bad_alloc();
    });
    ADD_FAILURE() << "no error";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("device_constant 'test huge rows': host memory ran out building it for "
                                         "1099511627776 row(s)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(device_constant_bytes(here()), kept_before);
}

// An integer constant used as an index is range-checked once for a limit (the CPU's kept bytes are
// their own host copy, tensor/host_copy.hpp), not by each op that takes it; a smaller limit scans
// it again, and a value outside raises at every call. (A GPU's: tests/gpu/gpu_device_checks_test.)
TEST(DeviceConstant, AnIndexConstantIsCheckedOnceForALimitAndAValueOutsideRaisesEachTime) {
  const auto kept = [] {
    return device_constant({"test checked rows"}, 3, [](std::int64_t n) {
      const std::vector<std::int64_t> v{2, 0, 5};
      return Tensor::from_vector(std::vector<std::int64_t>(v.begin(), v.begin() + n), {n});
    });
  };
  const Tensor table = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {8, 1});
  const std::uint64_t scans = detail::host_copy_scans();
  Tensor rows;
  for (int i = 0; i < 3; ++i) rows = gather_rows(table, kept());
  EXPECT_EQ(detail::host_copy_scans(), scans + 1);
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{2, 0, 5}));
  const Tensor four = table.slice(0, 4);
  for (int i = 0; i < 2; ++i) {
    try {
      (void)gather_rows(four, kept());
      ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
      EXPECT_STREQ(e.what(), "gather_rows: label 5 at index 2 is outside [0, 4)");
    }
  }
  EXPECT_EQ(detail::host_copy_scans(), scans + 3);
  // Labels that are no constant are scanned at each call.
  const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{1, 0}, {2});
  (void)gather_rows(table, labels);
  (void)gather_rows(table, labels);
  EXPECT_EQ(detail::host_copy_scans(), scans + 5);
}

// A CPU tensor is its own host copy (a kept index constant, a batch the input path leaves where
// it is): remembered so, its bytes are found while it lives, and the memory is not kept alive by
// being remembered (each CPU batch of a fit was kept for good, and every later copy walked them).
TEST(DeviceConstant, ACpuTensorRememberedAsItsOwnHostCopyIsNotKeptAliveByIt) {
  Tensor t = Tensor::from_vector(std::vector<std::int64_t>{3, 1, 2}, {3});
  detail::remember_host_copy(t, t);
  std::shared_ptr<const void> bytes = detail::host_copy_of(t);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(static_cast<const std::int64_t*>(bytes.get())[0], 3);
  const std::weak_ptr<Storage> memory = t.impl()->storage;
  bytes.reset();
  t = Tensor();
  EXPECT_TRUE(memory.expired()) << "the tensor's memory outlived it: its host-copy entry holds it";
}

}  // namespace
}  // namespace lockstep
