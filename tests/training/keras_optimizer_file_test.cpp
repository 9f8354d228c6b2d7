// The optimizer's state in Keras 3 files (.keras, .weights.h5), as Keras' optimizer.variables:
// fit after load continues bit for bit as if the model had never been saved, the file has Keras'
// layout, and a file whose optimizer variables do not fit is skipped as Keras skips it (another
// count) or refused naming the variable (another shape, dtype or a value out of range), with
// nothing half-loaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using test::inputs;
using test::io_message_of;
using test::labels;
using test::same_bits;

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

std::string fresh_dir(const std::string& name) {
  const std::string d = test::fresh_test_dir("keras_optimizer_file", name);
  std::filesystem::create_directories(d);
  return d;
}

// Six trainable variables (two Dense kernels and biases, BatchNormalization's gamma and beta) and
// two that are not (its moving statistics, which get no slots).
std::unique_ptr<Sequential> mlp(optimizers::OptimizerPtr optimizer) {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 4), layers::BatchNormalization(),
                                    layers::Dense(3, "softmax")},
      "mlp");
  m->compile(std::move(optimizer), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// Bit for bit, in order (two models made in one process name their layers apart).
void expect_same_values(const Model& a, const Model& b) {
  const auto va = a.variables(), vb = b.variables();
  ASSERT_EQ(va.size(), vb.size());
  for (std::size_t i = 0; i < va.size(); ++i)
    EXPECT_TRUE(same_bits(va[i].read_value(), vb[i].read_value())) << va[i].name();
}

const Tensor& x_train() {
  static const Tensor x = inputs(48, 4);
  return x;
}
const Tensor& y_train() {
  static const Tensor y = labels(48, 3);
  return y;
}
void fit_epoch(Model& m) {  // six steps, in order
  m.fit(x_train(), y_train(), {.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0});
}

io::H5Content weights_of(const std::string& keras_path) {
  const auto entries = io::decode_zip(io::read_file(keras_path), keras_path);
  return io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, keras_path, {.attributes = true});
}

std::size_t datasets_under(const io::H5Content& h5, const std::string& group) {
  std::size_t n = 0;
  for (const auto& d : h5.datasets)
    if (d.path.rfind(group + "/", 0) == 0) ++n;
  return n;
}

std::int64_t int_at(const io::H5Content& h5, const std::string& path) {
  const Tensor* t = h5.find_dataset(path);
  EXPECT_NE(t, nullptr) << path;
  return t ? t->to_vector<std::int64_t>().at(0) : -1;
}
float float_at(const io::H5Content& h5, const std::string& path) {
  const Tensor* t = h5.find_dataset(path);
  EXPECT_NE(t, nullptr) << path;
  return t ? t->to_vector<float>().at(0) : -1.0f;
}

optimizers::OptimizerPtr rmsprop_with_momentum_centered() {
  optimizers::RMSpropOptions o;
  o.learning_rate = 1e-2;
  o.momentum = 0.5;
  o.centered = true;
  return optimizers::RMSprop(o);
}

struct Case {
  const char* name;
  std::function<optimizers::OptimizerPtr()> make;
};
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"Adam", [] { return optimizers::Adam(1e-2); }},
      {"AdamW", [] { return optimizers::AdamW(1e-2, 0.05); }},
      {"SGD with Nesterov momentum", [] { return optimizers::SGD(0.05, 0.9, true); }},
      {"SGD", [] { return optimizers::SGD(0.05); }},
      {"RMSprop with momentum, centered",
       [] { return rmsprop_with_momentum_centered(); }},
      {"Adam on a schedule",
       [] { return optimizers::get("adam", optimizers::schedules::ExponentialDecay(0.02, 2, 0.5)); }},
  };
  return all;
}

// Saved after six steps and loaded, a model trains the next six to the bits of the model that
// went on without saving: the step count (Adam's bias correction, the schedule's step), the rate
// and the slots came back. The same through save_weights / load_weights into a compiled model.
TEST(KerasOptimizerFile, FitAfterLoadContinuesAsIfNeverSaved) {
  const std::string dir = fresh_dir("continue");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto model = mlp(c.make());
    fit_epoch(*model);
    save_model(*model, dir + "/m.keras");
    save_weights(*model, dir + "/m.weights.h5");
    auto loaded = load_model(dir + "/m.keras");
    auto weights_only = mlp(c.make());
    load_weights(*weights_only, dir + "/m.weights.h5");
    for (Model* m : std::vector<Model*>{loaded.get(), weights_only.get()}) {
      ASSERT_TRUE(m->compiled());
      EXPECT_EQ(m->optimizer()->iterations(), 6);
      EXPECT_EQ(m->optimizer()->current_learning_rate(), model->optimizer()->current_learning_rate());
    }
    fit_epoch(*model);
    fit_epoch(*loaded);
    fit_epoch(*weights_only);
    expect_same_values(*model, *loaded);
    expect_same_values(*model, *weights_only);
  }
}

// Keras 3's layout: optimizer/vars (named as the optimizer) holds iterations, learning_rate (not
// under a schedule) and, from the first step on, the slots of each trainable variable in the
// model's order (Adam's m then v of each); before the first step only the first two, as Keras'
// unbuilt optimizer, which loads as a fresh one, silently.
TEST(KerasOptimizerFile, FileHasKerasOptimizerVariables) {
  const std::string dir = fresh_dir("layout");
  auto model = mlp(optimizers::Adam(1e-2));
  save_model(*model, dir + "/unbuilt.keras");
  const io::H5Content unbuilt = weights_of(dir + "/unbuilt.keras");
  EXPECT_EQ(datasets_under(unbuilt, "optimizer/vars"), 2u);
  EXPECT_EQ(int_at(unbuilt, "optimizer/vars/0"), 0);
  EXPECT_EQ(float_at(unbuilt, "optimizer/vars/1"), 1e-2f);
  ::testing::internal::CaptureStderr();
  auto fresh = load_model(dir + "/unbuilt.keras");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_FALSE(fresh->optimizer()->built());

  fit_epoch(*model);
  model->optimizer()->set_learning_rate(3e-3);  // as ReduceLROnPlateau would
  save_model(*model, dir + "/m.keras");
  const io::H5Content h5 = weights_of(dir + "/m.keras");
  ASSERT_NE(h5.find_group("optimizer/vars"), nullptr);
  EXPECT_EQ(h5.find_group("optimizer/vars")->attributes.at("name"), "adam");
  const std::vector<Variable> trainable = model->trainable_variables();
  ASSERT_EQ(trainable.size(), 6u);
  ASSERT_EQ(datasets_under(h5, "optimizer/vars"), 2 + 2 * trainable.size());
  EXPECT_EQ(h5.find_dataset("optimizer/vars/0")->dtype(), DType::kI64);
  EXPECT_EQ(int_at(h5, "optimizer/vars/0"), 6);
  EXPECT_EQ(float_at(h5, "optimizer/vars/1"), 3e-3f);
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    const auto slots = model->optimizer()->slots(trainable[i]);
    for (std::size_t s = 0; s < 2; ++s) {
      const Tensor* t = h5.find_dataset("optimizer/vars/" + std::to_string(2 + 2 * i + s));
      ASSERT_NE(t, nullptr);
      EXPECT_TRUE(same_bits(*t, slots[s].second.on_host())) << trainable[i].name() << " " << slots[s].first;
    }
  }
  // The compile config's rate (a double) stays where the file's float32 is its rounding.
  EXPECT_EQ(load_model(dir + "/m.keras")->optimizer()->current_learning_rate(), 3e-3);

  // Under a schedule there is no learning_rate variable; include_optimizer = false writes none.
  auto scheduled = mlp(optimizers::get("sgd", optimizers::schedules::ExponentialDecay(0.1, 2, 0.5)));
  fit_epoch(*scheduled);
  save_model(*scheduled, dir + "/scheduled.keras");
  EXPECT_EQ(datasets_under(weights_of(dir + "/scheduled.keras"), "optimizer/vars"), 1u) << "iterations alone";
  save_model(*model, dir + "/bare.keras", {.include_optimizer = false});
  EXPECT_EQ(datasets_under(weights_of(dir + "/bare.keras"), "optimizer"), 0u);
  EXPECT_EQ(load_model(dir + "/bare.keras")->optimizer()->iterations(), 0) << "a fresh optimizer";
}

// RMSprop's slots are in Keras 3's order, which is not Adam's: its build() makes every variable's
// velocity, then every momentum, then every average gradient (Adam interleaves m and v per
// variable). A file in the other order would give Keras each slot of another variable.
TEST(KerasOptimizerFile, RMSpropSlotsAreInKerasOrderSlotBySlot) {
  const std::string dir = fresh_dir("rmsprop");
  auto model = mlp(rmsprop_with_momentum_centered());
  fit_epoch(*model);
  save_model(*model, dir + "/m.keras");
  const io::H5Content h5 = weights_of(dir + "/m.keras");
  const std::vector<Variable> trainable = model->trainable_variables();
  const std::size_t n = trainable.size();
  ASSERT_EQ(datasets_under(h5, "optimizer/vars"), 2 + 3 * n);
  for (std::size_t s = 0; s < 3; ++s)
    for (std::size_t i = 0; i < n; ++i) {
      const auto slots = model->optimizer()->slots(trainable[i]);
      const Tensor* t = h5.find_dataset("optimizer/vars/" + std::to_string(2 + s * n + i));
      ASSERT_NE(t, nullptr);
      EXPECT_TRUE(same_bits(*t, slots.at(s).second.on_host())) << trainable[i].name() << " " << slots.at(s).first;
    }
}

// Under mixed_float16 compile wraps the optimizer in a LossScaleOptimizer; Keras 3 saves its own
// iterations and learning_rate (left at 0), step_counter and dynamic_scale, then the inner
// optimizer's variables, which it writes again under optimizer/inner_optimizer/vars. The scale
// and its counter come back, and training goes on as if never saved.
TEST(KerasOptimizerFile, LossScaleStateComesBack) {
  const std::string dir = fresh_dir("loss_scale");
  mixed_precision::set_global_policy("mixed_float16");
  struct Reset {
    ~Reset() { mixed_precision::set_global_policy("float32"); }
  } reset;
  auto model = mlp(optimizers::Adam(1e-2));
  auto* ls = dynamic_cast<optimizers::LossScaleOptimizer*>(model->optimizer().get());
  ASSERT_NE(ls, nullptr);
  fit_epoch(*model);
  save_model(*model, dir + "/m.keras");
  const io::H5Content h5 = weights_of(dir + "/m.keras");
  const std::size_t inner = 2 + 2 * 6;
  ASSERT_EQ(datasets_under(h5, "optimizer/vars"), 4 + inner);
  EXPECT_EQ(h5.find_group("optimizer/vars")->attributes.at("name"), "loss_scale_optimizer");
  EXPECT_EQ(int_at(h5, "optimizer/vars/0"), 0);
  EXPECT_EQ(float_at(h5, "optimizer/vars/1"), 0.0f);
  EXPECT_EQ(int_at(h5, "optimizer/vars/2"), ls->step_counter());
  EXPECT_EQ(float_at(h5, "optimizer/vars/3"), static_cast<float>(ls->loss_scale()));
  EXPECT_EQ(int_at(h5, "optimizer/vars/4"), ls->iterations());
  EXPECT_EQ(datasets_under(h5, "optimizer/inner_optimizer/vars"), inner);
  EXPECT_EQ(h5.find_group("optimizer/inner_optimizer/vars")->attributes.at("name"), "adam");
  EXPECT_TRUE(same_bits(*h5.find_dataset("optimizer/inner_optimizer/vars/2"), *h5.find_dataset("optimizer/vars/6")));

  auto loaded = load_model(dir + "/m.keras");
  const auto* back = dynamic_cast<const optimizers::LossScaleOptimizer*>(loaded->optimizer().get());
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->loss_scale(), ls->loss_scale());
  EXPECT_EQ(back->step_counter(), ls->step_counter());
  EXPECT_EQ(back->iterations(), ls->iterations());
  fit_epoch(*model);
  fit_epoch(*loaded);
  expect_same_values(*model, *loaded);
}

// A good archive of an Adam mlp after six steps, whose optimizer variables a test then changes.
class BrokenOptimizer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto model = mlp(optimizers::Adam(1e-2));
    fit_epoch(*model);
    save_model(*model, dir_ + "/good.keras");
    entries_ = io::decode_zip(io::read_file(dir_ + "/good.keras"), "good.keras");
    h5_ = io::decode_hdf5(io::find_entry(entries_, "model.weights.h5")->bytes, "w", {.attributes = true});
  }
  // The archive with h5_ as it is now.
  std::string write(const std::string& name) {
    auto copy = entries_;
    for (auto& e : copy)
      if (e.name == "model.weights.h5") e.bytes = io::encode_hdf5(h5_);
    io::write_file_atomic(dir_ + "/" + name, io::encode_zip(copy));
    return dir_ + "/" + name;
  }
  Tensor& dataset(const std::string& path) {
    for (auto& d : h5_.datasets)
      if (d.path == path) return d.value;
    throw std::runtime_error("no dataset " + path);
  }
  // load_model's IOError, and the same file's load_weights into a compiled model that trained
  // one epoch already: refused before anything is assigned (its weights and count unchanged).
  std::string refused(const std::string& name) {
    const std::string path = write(name);
    std::string m = io_message_of([&] { load_model(path); });
    EXPECT_HAS(m, name);
    auto target = mlp(optimizers::Adam(1e-2));
    fit_epoch(*target);
    const Tensor kernel = target->variables()[0].read_value();
    io::write_file_atomic(dir_ + "/w.weights.h5", io::find_entry(io::decode_zip(io::read_file(path), path),
                                                                 "model.weights.h5")->bytes);
    io_message_of([&] { load_weights(*target, dir_ + "/w.weights.h5"); });
    EXPECT_TRUE(same_bits(kernel, target->variables()[0].read_value())) << "nothing half-loaded";
    EXPECT_EQ(target->optimizer()->iterations(), 6);
    return m;
  }
  std::string dir_;
  std::vector<io::ZipEntry> entries_;
  io::H5Content h5_;
};

TEST_F(BrokenOptimizer, AnotherShapeOrDtypeIsNamed) {
  dataset("optimizer/vars/2") = Tensor::zeros(Shape{8, 4});
  EXPECT_HAS(refused("shape.keras"),
             "model.weights.h5 optimizer/vars/2 is (8, 4) float32 but the optimizer's slot 'm' of variable "
             "'dense/kernel' is (4, 8) float32 (optimizer Adam)");
  dataset("optimizer/vars/2") = Tensor::zeros(Shape{4, 8});
  dataset("optimizer/vars/0") = Tensor::from_vector(std::vector<float>{6}, Shape{});
  EXPECT_HAS(refused("dtype.keras"), "optimizer/vars/0 is () float32 but the optimizer's iterations is () int64");
}

TEST_F(BrokenOptimizer, AValueOutOfRangeOrAGapIsNamed) {
  dataset("optimizer/vars/0") = Tensor::from_vector(std::vector<std::int64_t>{-3}, Shape{});
  EXPECT_HAS(refused("negative.keras"), "optimizer/vars/0 holds iterations -3, which must be >= 0");
  dataset("optimizer/vars/0") = Tensor::from_vector(std::vector<std::int64_t>{6}, Shape{});
  dataset("optimizer/vars/1") = Tensor::from_vector(std::vector<float>{std::numeric_limits<float>::quiet_NaN()}, Shape{});
  EXPECT_HAS(refused("nan.keras"), "optimizer/vars/1 holds learning_rate nan");
  dataset("optimizer/vars/1") = Tensor::from_vector(std::vector<float>{1e-2f}, Shape{});
  for (auto& d : h5_.datasets)
    if (d.path == "optimizer/vars/5") d.path = "optimizer/vars/x";
  EXPECT_HAS(refused("gap.keras"), "has 14 datasets in optimizer/vars but no optimizer/vars/5");
}

// Keras 3's load_own_variables warns and skips an optimizer whose variable count differs (another
// optimizer's file, another model's): the model loads with a fresh optimizer.
TEST_F(BrokenOptimizer, AnotherCountWarnsAndStartsAfresh) {
  std::erase_if(h5_.datasets, [](const io::H5Dataset& d) { return d.path == "optimizer/vars/13"; });
  const std::string path = write("count.keras");
  ::testing::internal::CaptureStderr();
  auto loaded = load_model(path);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "WARNING: Keras file '" + path + "': model.weights.h5: skipping variable loading for optimizer "
                  "'adam', because it has 14 variables whereas the saved optimizer has 13 variables");
  EXPECT_EQ(loaded->optimizer()->iterations(), 0);
  EXPECT_FALSE(loaded->optimizer()->built());

  // An SGD-with-momentum model's file (2 + 6 variables) into an Adam model (2 + 12).
  auto sgd = mlp(optimizers::SGD(0.1, 0.9));
  fit_epoch(*sgd);
  save_weights(*sgd, dir_ + "/sgd.weights.h5");
  auto adam = mlp(optimizers::Adam(1e-2));
  ::testing::internal::CaptureStderr();
  load_weights(*adam, dir_ + "/sgd.weights.h5");
  EXPECT_HAS(::testing::internal::GetCapturedStderr(), "it has 14 variables whereas the saved optimizer has 8");
  EXPECT_EQ(adam->optimizer()->iterations(), 0);
  expect_same_values(*sgd, *adam);  // the weights themselves load
}

}  // namespace
}  // namespace lockstep
