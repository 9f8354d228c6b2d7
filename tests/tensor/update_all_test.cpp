// Optimizer updates of several variables in one launch (lockstep/tensor/ops_update_all.hpp): each
// variable gets the bits of its own update, in one launch per 32 variables, and the optimizers
// update all their variables that way. (On GPUs, captured: tests/gpu/gpu_kernel_launches_test.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/optimizers/optimizer.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops_update_all.hpp"

using namespace lockstep;
using detail::kernel_launches;

namespace {
const Device kCpu{};

struct Vars {
  std::vector<Tensor> w, m, v, g;
};
// `count` variables of 1, 38, 75, ... elements: weights, two slots and gradients.
Vars make_vars(int count, std::uint64_t seed) {
  Vars s;
  for (int i = 0; i < count; ++i) {
    const Shape shape{1 + 37 * static_cast<std::int64_t>(i % 5)};
    const std::uint64_t k = seed + 4 * static_cast<std::uint64_t>(i);
    s.w.push_back(test::random_uniform(shape, k));
    s.m.push_back(test::random_uniform(shape, k + 1, -0.1f, 0.1f));
    s.v.push_back(test::random_uniform(shape, k + 2, 0.0f, 0.01f));
    s.g.push_back(test::random_uniform(shape, k + 3));
  }
  return s;
}
Vars clone(const Vars& s) {
  Vars c;
  for (std::size_t i = 0; i < s.w.size(); ++i) {
    c.w.push_back(s.w[i].clone());
    c.m.push_back(s.m[i].clone());
    c.v.push_back(s.v[i].clone());
    c.g.push_back(s.g[i]);
  }
  return c;
}
void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].bitwise_equal(want[i])) << what << " " << i;
}
}  // namespace

TEST(UpdateAll, AdamGivesEachVariableTheBitsOfItsOwnUpdateInOneLaunchPer32Variables) {
  for (const float decay : {0.0f, 1e-3f}) {  // Adam, AdamW
    const AdamConstants c{.alpha = 1e-2f,
                          .one_minus_beta_1 = 0.1f,
                          .one_minus_beta_2 = 0.001f,
                          .epsilon = 1e-7f,
                          .decay = decay};
    Vars one = make_vars(40, 7), all = clone(one);
    for (std::size_t i = 0; i < one.w.size(); ++i) adam_update_(one.w[i], one.m[i], one.v[i], one.g[i], c);
    const std::uint64_t multi = kernel_launches(kCpu, "adam_update_multi"),
                        single = kernel_launches(kCpu, "adam_update");
    adam_update_all_(all.w, all.m, all.v, all.g, c);
    EXPECT_EQ(kernel_launches(kCpu, "adam_update_multi") - multi, 2u);  // 32 + 8 variables
    EXPECT_EQ(kernel_launches(kCpu, "adam_update"), single);
    expect_same_bits(all.w, one.w, "weights");
    expect_same_bits(all.m, one.m, "first moment");
    expect_same_bits(all.v, one.v, "second moment");
  }
}

TEST(UpdateAll, SgdGivesEachVariableTheBitsOfItsOwnUpdateWithAndWithoutMomentum) {
  for (const float mu : {0.0f, 0.9f})
    for (const bool nesterov : {false, true}) {
      Vars one = make_vars(5, 11), all = clone(one);
      std::vector<Tensor> none;
      for (std::size_t i = 0; i < one.w.size(); ++i) {
        Tensor m = mu > 0 ? one.m[i] : Tensor();
        sgd_update_(one.w[i], m, one.g[i], 0.05f, mu, nesterov);
      }
      sgd_update_all_(all.w, mu > 0 ? all.m : none, all.g, 0.05f, mu, nesterov);
      expect_same_bits(all.w, one.w, "weights");
      expect_same_bits(all.m, one.m, "momentum");
    }
}

// Keras' RMSprop in its four forms (plain, momentum, centered, both): velocity in v, momentum in
// m, the average gradient in a third slot list; five steps, so the slots' own values feed back.
TEST(UpdateAll, RmspropGivesEachVariableTheBitsOfItsOwnUpdateInEveryFormInOneLaunchPer32Variables) {
  for (const float momentum : {0.0f, 0.9f})
    for (const bool centered : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "momentum " << momentum << " centered " << centered);
      const RmspropConstants c{.rho = 0.9f, .one_minus_rho = 0.1f, .epsilon = 1e-7f, .momentum = momentum};
      Vars one = make_vars(40, 3), all = clone(one);
      std::vector<Tensor> averages, averages_all;  // centered: the average gradient, small and signed
      for (std::size_t i = 0; i < one.w.size(); ++i) {
        if (!centered) break;
        averages.push_back(test::random_uniform(one.w[i].shape(), 500 + i, -0.01f, 0.01f));
        averages_all.push_back(averages.back().clone());
      }
      std::vector<Tensor> none, none_all;
      std::vector<Tensor>& ms = momentum > 0 ? one.m : none;
      std::vector<Tensor>& ms_all = momentum > 0 ? all.m : none_all;
      for (int step = 0; step < 5; ++step) {
        for (std::size_t i = 0; i < one.w.size(); ++i) {
          Tensor m = momentum > 0 ? ms[i] : Tensor(), a = centered ? averages[i] : Tensor();
          rmsprop_update_(one.w[i], one.v[i], m, a, one.g[i], 0.01f, c);
        }
        const std::uint64_t multi = kernel_launches(kCpu, "rmsprop_update_multi"),
                            single = kernel_launches(kCpu, "rmsprop_update");
        rmsprop_update_all_(all.w, all.v, ms_all, averages_all, all.g, 0.01f, c);
        EXPECT_EQ(kernel_launches(kCpu, "rmsprop_update_multi") - multi, 2u);  // 32 + 8 variables
        EXPECT_EQ(kernel_launches(kCpu, "rmsprop_update"), single);
      }
      expect_same_bits(all.w, one.w, "weights");
      expect_same_bits(all.v, one.v, "velocity");
      expect_same_bits(ms_all, ms, "momentum");
      expect_same_bits(averages_all, averages, "average gradient");
      // The five steps moved the weights (a test of nothing otherwise).
      EXPECT_FALSE(all.w[1].bitwise_equal(make_vars(40, 3).w[1]));
    }
}

TEST(UpdateAll, ListsThatDoNotMatchAreRefusedByName) {
  const AdamConstants c{
      .alpha = 1e-2f, .one_minus_beta_1 = 0.1f, .one_minus_beta_2 = 0.001f, .epsilon = 1e-7f};
  Vars s = make_vars(3, 1);
  const std::vector<Tensor> two(s.g.begin(), s.g.begin() + 2);
  EXPECT_THROW(
      {
        try {
          adam_update_all_(s.w, s.m, s.v, two, c);
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("Adam: 2 gradients for 3 variables"), std::string::npos)
              << e.what();
          throw;
        }
      },
      ValueError);
  std::vector<Tensor> ms = s.m;
  ms[1] = Tensor::zeros({2, 2});
  EXPECT_THROW(
      {
        try {
          adam_update_all_(s.w, ms, s.v, s.g, c);
        } catch (const ValueError& e) {
          EXPECT_NE(
              std::string(e.what()).find("first moment (2, 2) float32 does not match the variable (38,)"),
              std::string::npos)
              << e.what();
          throw;
        }
      },
      ValueError);
  std::vector<Tensor> none;
  EXPECT_THROW(sgd_update_all_(s.w, none, s.g, 0.1f, 0.9f, false), ValueError);  // momentum without slots
  // RMSprop: momentum slots without a momentum (and the reverse), an average list too short.
  const RmspropConstants plain{.rho = 0.9f, .one_minus_rho = 0.1f, .epsilon = 1e-7f, .momentum = 0};
  EXPECT_THROW(
      {
        try {
          rmsprop_update_all_(s.w, s.v, s.m, none, s.g, 0.1f, plain);
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("RMSprop: momentum slots go with a momentum > 0, got 3 momentum "
                                               "slots and momentum 0"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      ValueError);
  RmspropConstants with_momentum = plain;
  with_momentum.momentum = 0.5f;
  EXPECT_THROW(rmsprop_update_all_(s.w, s.v, none, none, s.g, 0.1f, with_momentum), ValueError);
  std::vector<Tensor> short_averages = two;
  EXPECT_THROW(
      {
        try {
          rmsprop_update_all_(s.w, s.v, none, short_averages, s.g, 0.1f, plain);
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("RMSprop: 2 average gradient slots for 3 variables"), std::string::npos)
              << e.what();
          throw;
        }
      },
      ValueError);
}

// The optimizers update all their variables with one launch (of a dtype, per 32 variables).
TEST(UpdateAll, AdamSgdAndRmspropUpdateAModelsVariablesInOneLaunch) {
  optimizers::RMSpropOptions centered;
  centered.momentum = 0.5;
  centered.centered = true;
  for (const char* which : {"adam_update_multi", "sgd_update_multi", "rmsprop_update_multi"}) {
    const std::string kernel = which;
    auto opt = kernel == "adam_update_multi" ? optimizers::Adam(1e-2)
               : kernel == "sgd_update_multi" ? optimizers::SGD(0.1, 0.9)
                                              : optimizers::RMSprop(centered);
    std::vector<Variable> vars;
    std::vector<Tensor> grads;
    for (int i = 0; i < 3; ++i) {
      vars.push_back(Variable(test::random_uniform({4, 1 + i}, 20 + static_cast<std::uint64_t>(i))));
      grads.push_back(test::random_uniform({4, 1 + i}, 30 + static_cast<std::uint64_t>(i)));
    }
    const std::uint64_t before = kernel_launches(kCpu, which);
    opt->apply_gradients(grads, vars);
    EXPECT_EQ(kernel_launches(kCpu, which) - before, 1u) << which;
  }
}
