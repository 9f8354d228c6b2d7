// optimizers::serialize / deserialize, the one owner of Keras' optimizer options: Keras 3's own
// configs load as the optimizers they describe; what serialize writes deserialize reads back with
// every option set, so that an option added to one and not the other fails here; an option no
// optimizer of the class reads is refused by name unless it is Keras' "off", as is another class.
#include "lockstep/optimizers/optimizer_config.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/optimizers/schedules.hpp"

namespace lockstep {
namespace {
using nlohmann::json;

optimizers::OptimizerPtr from_keras(const std::string& cls, const std::string& config) {
  return optimizers::deserialize({{"class_name", cls}, {"config", json::parse(config)}});
}

// What keras.optimizers.serialize(...)["config"] gives in Keras 3.15.1 for SGD(0.05, momentum=0.5,
// nesterov=True, clipnorm=1.5), Adam(0.002, beta_1=0.8, beta_2=0.99, epsilon=1e-6,
// global_clipnorm=2.0), AdamW(0.003, weight_decay=0.01, clipvalue=0.5) and RMSprop(0.004, rho=0.8,
// momentum=0.25, epsilon=1e-5, centered=True): every argument written, Keras' "off" for those
// lockstep lacks.
TEST(OptimizerConfig, KerasConfigsLoadAsTheOptimizersTheyDescribe) {
  const char* common = R"("weight_decay": null, "use_ema": false, "ema_momentum": 0.99, "ema_overwrite_frequency": null,
                          "loss_scale_factor": null, "gradient_accumulation_steps": null)";
  const auto sgd = from_keras("SGD", std::string(R"({"name": "sgd", "learning_rate": 0.05000000074505806,
      "clipnorm": 1.5, "global_clipnorm": null, "clipvalue": null, "momentum": 0.5, "nesterov": true, )") +
                                         common + "}");
  EXPECT_EQ(sgd->name(), "SGD");
  EXPECT_EQ(sgd->current_learning_rate(), 0.05000000074505806);
  EXPECT_EQ(sgd->options().clipnorm, 1.5);
  EXPECT_EQ(sgd->hyperparameters(), (std::map<std::string, double>{{"momentum", 0.5}, {"nesterov", 1.0}}));

  const auto adam = from_keras("Adam", std::string(R"({"name": "adam", "learning_rate": 0.0020000000949949026,
      "clipnorm": null, "global_clipnorm": 2.0, "clipvalue": null, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-06,
      "amsgrad": false, )") + common + "}");
  EXPECT_EQ(adam->name(), "Adam");
  EXPECT_EQ(adam->options().global_clipnorm, 2.0);
  EXPECT_EQ(adam->hyperparameters(),
            (std::map<std::string, double>{{"beta_1", 0.8}, {"beta_2", 0.99}, {"epsilon", 1e-6}}));

  const auto adamw = from_keras("AdamW", R"({"name": "adam_w", "learning_rate": 0.003000000026077032,
      "weight_decay": 0.01, "clipnorm": null, "global_clipnorm": null, "clipvalue": 0.5, "use_ema": false,
      "ema_momentum": 0.99, "ema_overwrite_frequency": null, "loss_scale_factor": null,
      "gradient_accumulation_steps": null, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-07, "amsgrad": false})");
  EXPECT_EQ(adamw->name(), "AdamW");
  EXPECT_EQ(adamw->options().clipvalue, 0.5);
  EXPECT_EQ(adamw->hyperparameters().at("weight_decay"), 0.01);

  const auto rmsprop = from_keras("RMSprop", std::string(R"({"name": "rm_sprop", "learning_rate": 0.004000000189989805,
      "clipnorm": null, "global_clipnorm": null, "clipvalue": null, "rho": 0.8, "momentum": 0.25, "epsilon": 1e-05,
      "centered": true, )") + common + "}");
  EXPECT_EQ(rmsprop->name(), "RMSprop");
  EXPECT_EQ(rmsprop->hyperparameters(), (std::map<std::string, double>{
                                            {"rho", 0.8}, {"momentum", 0.25}, {"epsilon", 1e-5}, {"centered", 1.0}}));
  // A config without a learning rate (Keras' class defaults, as "adam" by name) takes the class's.
  EXPECT_EQ(from_keras("SGD", "{}")->current_learning_rate(), 0.01);
  EXPECT_EQ(from_keras("RMSprop", "{}")->current_learning_rate(), 0.001);
}

// Each optimizer with every option away from its default (clipping, a schedule): deserialize
// gives back what serialize wrote, option for option.
TEST(OptimizerConfig, WhatSerializeWritesDeserializeReadsEveryOptionSet) {
  optimizers::SGDOptions sgd;
  sgd.learning_rate = 0.3;
  sgd.momentum = 0.7;
  sgd.nesterov = true;
  sgd.clipnorm = 1.25;
  optimizers::AdamWOptions adamw;
  adamw.beta_1 = 0.7;
  adamw.beta_2 = 0.95;
  adamw.epsilon = 1e-5;
  adamw.weight_decay = 0.02;
  adamw.global_clipnorm = 3.0;
  optimizers::AdamOptions adam;
  adam.schedule = optimizers::schedules::ExponentialDecay(0.01, 10, 0.5);
  adam.clipvalue = 0.25;
  optimizers::RMSpropOptions rmsprop;
  rmsprop.rho = 0.7;
  rmsprop.momentum = 0.4;
  rmsprop.epsilon = 1e-4;
  rmsprop.centered = true;
  const std::vector<optimizers::OptimizerPtr> all = {optimizers::SGD(sgd), optimizers::AdamW(adamw),
                                                     optimizers::Adam(adam), optimizers::RMSprop(rmsprop)};
  for (const auto& opt : all) {
    const json written = optimizers::serialize(*opt);
    const auto back = optimizers::deserialize(written);
    EXPECT_EQ(optimizers::serialize(*back), written) << opt->name();
    EXPECT_EQ(back->hyperparameters(), opt->hyperparameters()) << opt->name();
  }
}

// Every class: an unknown key is refused naming the class, the key and its value (the message
// metrics and schedules give too); Keras' "off" for it passes.
TEST(OptimizerConfig, EveryClassRefusesAnUnknownKeyNamingClassAndKey) {
  for (const std::string cls : {"SGD", "Adam", "AdamW", "RMSprop"}) {
    SCOPED_TRACE(cls);
    EXPECT_VALUE_ERROR(from_keras(cls, R"({"learning_rate": 0.01, "bogus": [1]})"),
                       "optimizer " + cls + ": argument bogus=[1] is not supported");
    EXPECT_EQ(from_keras(cls, R"({"learning_rate": 0.01, "bogus": null, "unused": false})")->name(), cls);
  }
}

TEST(OptimizerConfig, AnOptionTheClassDoesNotReadIsRefusedByNameUnlessOff) {
  EXPECT_VALUE_ERROR(from_keras("Adam", R"({"learning_rate": 0.001, "amsgrad": true})"),
                     "optimizer Adam: argument amsgrad=true is not supported");
  EXPECT_VALUE_ERROR(from_keras("SGD", R"({"learning_rate": 0.01, "use_ema": true})"),
                     "optimizer SGD: argument use_ema=true is not supported");
  // Another class's option: Keras' Adam has no momentum.
  EXPECT_VALUE_ERROR(from_keras("Adam", R"({"learning_rate": 0.001, "momentum": 0.9})"),
                     "optimizer Adam: argument momentum=0.9 is not supported");
  EXPECT_VALUE_ERROR(from_keras("RMSprop", R"({"learning_rate": 0.001, "weight_decay": 0.01})"),
                     "optimizer RMSprop: argument weight_decay=0.01 is not supported (use AdamW)");
  EXPECT_VALUE_ERROR(from_keras("SGD", R"({"learning_rate": "fast"})"),
                     R"(optimizer SGD: argument learning_rate="fast" must be a finite number)");
  EXPECT_VALUE_ERROR(from_keras("Adagrad", R"({"learning_rate": 0.001})"), "optimizer Adagrad is not supported");
  EXPECT_VALUE_ERROR(optimizers::deserialize({{"class_name", "SGD"}, {"config", 3}}), "is not an object");
  // Keras' "off" (null or false) and its name are passed over.
  EXPECT_EQ(from_keras("Adam", R"({"name": "x", "amsgrad": false, "weight_decay": null, "momentum": null})")->name(),
            "Adam");
}

}  // namespace
}  // namespace lockstep
