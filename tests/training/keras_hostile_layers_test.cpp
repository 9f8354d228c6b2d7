// A .keras file whose layer config holds any value at any argument is a clear lockstep error or
// a model that runs: never a crash, a foreign exception (nlohmann's, std::bad_alloc, ...) or a
// hang. For every registered layer class, a small model holding it is saved, then each argument
// of the layer's config (and each element of a list argument, and each argument of a nested
// config such as an initializer's) is replaced in turn by hostile values, and the file is loaded
// and, where it loads, the model predicts. A load that fails must be an IOError naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/random_data.hpp"
#include "io/zip_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/activation_layers.hpp"
#include "lockstep/layers/bidirectional.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/group_normalization.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/layer_normalization.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/layers/merge_layers.hpp"
#include "lockstep/layers/multi_head_attention.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/layers/position_embedding.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/layers/random_affine_layers.hpp"
#include "lockstep/layers/recurrent_layers.hpp"
#include "lockstep/layers/regularization_layers.hpp"
#include "lockstep/layers/sequence_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
namespace L = layers;

/// A model of one layer of class `cls` on inputs of one example's shape `input` (two such inputs
/// where `inputs` is 2: the merge layers and attention).
struct Sample {
  std::string cls;
  Shape input;
  std::function<L::LayerPtr()> make;
  int inputs = 1;
};

void PrintTo(const Sample& s, std::ostream* os) { *os << s.cls; }

std::vector<Sample> samples() {
  const L::Conv2DOptions conv2d{.filters = 2, .kernel_size = {3, 3}, .padding = "same"};
  const L::Conv1DOptions conv1d{.filters = 2, .kernel_size = 2};
  const L::Conv2DTransposeOptions convt2d{.filters = 2, .kernel_size = {2, 2}, .strides = {2, 2}};
  const L::Conv1DTransposeOptions convt1d{.filters = 2, .kernel_size = 2, .strides = 2};
  const L::SeparableConv2DOptions sep2d{.filters = 2, .kernel_size = {2, 2}};
  const L::SeparableConv1DOptions sep1d{.filters = 2, .kernel_size = 2};
  const Shape image{4, 4, 2}, seq{4, 3}, flat{6};
  return {
      {"Dense", flat, [] { return L::Dense(3, "relu"); }},
      {"Dropout", seq, [] { return L::Dropout(0.5f, {-1, 1, 3}, 3); }},
      {"Activation", flat, [] { return L::Activation("tanh"); }},
      {"Flatten", image, [] { return L::Flatten(); }},
      {"Reshape", flat, [] { return L::Reshape(Shape{2, 3}); }},
      {"Conv2D", image, [=] { return L::Conv2D(conv2d); }},
      {"DepthwiseConv2D", image, [] { return L::DepthwiseConv2D({.kernel_size = {2, 2}}); }},
      {"MaxPooling2D", image, [] { return L::MaxPooling2D(); }},
      {"AveragePooling2D", image, [] { return L::AveragePooling2D(); }},
      {"GlobalAveragePooling2D", image, [] { return L::GlobalAveragePooling2D(); }},
      {"GlobalMaxPooling2D", image, [] { return L::GlobalMaxPooling2D(); }},
      {"Conv1D", seq, [=] { return L::Conv1D(conv1d); }},
      {"MaxPooling1D", seq, [] { return L::MaxPooling1D(); }},
      {"AveragePooling1D", seq, [] { return L::AveragePooling1D(); }},
      {"ZeroPadding2D", image, [] { return L::ZeroPadding2D(); }},
      {"Rescaling", flat, [] { return L::Rescaling(0.5f, 1.0f); }},
      {"BatchNormalization", flat, [] { return L::BatchNormalization(); }},
      {"LayerNormalization", flat, [] { return L::LayerNormalization(); }},
      {"Add", flat, [] { return L::Add(); }, 2},
      {"MultiHeadAttention", seq, [] { return L::MultiHeadAttention({.num_heads = 2, .key_dim = 2}); }, 2},
      {"Softmax", flat, [] { return L::Softmax(); }},
      {"Masking", seq, [] { return L::Masking(); }},
      {"Embedding", Shape{4}, [] { return L::Embedding(5, 3, true); }},
      {"GlobalAveragePooling1D", seq, [] { return L::GlobalAveragePooling1D(); }},
      {"GlobalMaxPooling1D", seq, [] { return L::GlobalMaxPooling1D(); }},
      {"RepeatVector", flat, [] { return L::RepeatVector(2); }},
      {"Permute", seq, [] { return L::Permute({2, 1}); }},
      {"Concatenate", flat, [] { return L::Concatenate(); }, 2},
      {"Dot", flat, [] { return L::Dot(1); }, 2},
      {"Multiply", flat, [] { return L::Multiply(); }, 2},
      {"Subtract", flat, [] { return L::Subtract(); }, 2},
      {"Average", flat, [] { return L::Average(); }, 2},
      {"Maximum", flat, [] { return L::Maximum(); }, 2},
      {"Minimum", flat, [] { return L::Minimum(); }, 2},
      {"PositionEmbedding", seq, [] { return L::PositionEmbedding(4); }},
      {"SimpleRNN", seq, [] { return L::SimpleRNN(3); }},
      {"LSTM", seq, [] { return L::LSTM(3, true); }},
      {"GRU", seq, [] { return L::GRU(3); }},
      {"Bidirectional", seq, [] { return L::Bidirectional(L::LSTM(2)); }},
      {"ReLU", flat, [] { return L::ReLU(6.0f); }},
      {"LeakyReLU", flat, [] { return L::LeakyReLU(); }},
      {"ELU", flat, [] { return L::ELU(); }},
      {"PReLU", flat, [] { return L::PReLU(); }},
      {"SeparableConv2D", image, [=] { return L::SeparableConv2D(sep2d); }},
      {"Conv2DTranspose", image, [=] { return L::Conv2DTranspose(convt2d); }},
      {"UpSampling2D", image, [] { return L::UpSampling2D({2, 2}, "bilinear"); }},
      {"UpSampling1D", seq, [] { return L::UpSampling1D(); }},
      {"Cropping2D", image, [] { return L::Cropping2D({L::Pair{1, 0}, L::Pair{0, 1}}); }},
      {"ZeroPadding1D", seq, [] { return L::ZeroPadding1D(); }},
      {"Conv1DTranspose", seq, [=] { return L::Conv1DTranspose(convt1d); }},
      {"DepthwiseConv1D", seq, [] { return L::DepthwiseConv1D({.kernel_size = 2}); }},
      {"SeparableConv1D", seq, [=] { return L::SeparableConv1D(sep1d); }},
      {"Cropping1D", seq, [] { return L::Cropping1D(); }},
      {"SpatialDropout1D", seq, [] { return L::SpatialDropout1D(0.5f); }},
      {"SpatialDropout2D", image, [] { return L::SpatialDropout2D(0.5f); }},
      {"SpatialDropout3D", Shape{2, 2, 2, 2}, [] { return L::SpatialDropout3D(0.5f); }},
      {"GaussianNoise", flat, [] { return L::GaussianNoise(0.1f, 4); }},
      {"GaussianDropout", flat, [] { return L::GaussianDropout(0.1f); }},
      {"AlphaDropout", flat, [] { return L::AlphaDropout(0.1f); }},
      {"Identity", flat, [] { return L::Identity(); }},
      {"GroupNormalization", image, [] { return L::GroupNormalization({.groups = 2}); }},
      {"UnitNormalization", flat, [] { return L::UnitNormalization(); }},
      {"Normalization", flat,
       [] { return L::Normalization({.mean = std::vector<float>{0.5f}, .variance = std::vector<float>{2.0f}}); }},
      {"RandomFlip", image, [] { return L::RandomFlip(); }},
      {"RandomContrast", image, [] { return L::RandomContrast({0.2f}, {0.0f, 1.0f}); }},
      {"RandomBrightness", image, [] { return L::RandomBrightness({0.2f}, {0.0f, 1.0f}); }},
      {"RandomTranslation", image, [] { return L::RandomTranslation({0.2f}, {-0.1f, 0.3f}); }},
      {"RandomRotation", image, [] { return L::RandomRotation({0.1f}, {.fill_mode = "constant"}); }},
      {"RandomZoom", image, [] { return L::RandomZoom({0.2f}, std::vector<float>{-0.1f, 0.1f}); }},
      {"Resizing", image, [] { return L::Resizing(3, 5); }},
      {"CenterCrop", image, [] { return L::CenterCrop(2, 3); }},
      {"RandomCrop", image, [] { return L::RandomCrop(2, 3, 7); }},
  };
}

/// The values put in place of an argument (all of them) or of one element of a list argument
/// (the scalars): negative, zero, far too large, fractional, of the wrong type, null.
std::vector<json> hostile_values(bool element) {
  std::vector<json> v{json(-1), json(0), json(std::int64_t{1} << 40), json(0.5), json("bogus"), json(nullptr)};
  if (!element) {
    v.push_back(json::array());
    v.push_back(json::object());
    v.push_back(json::array({-1, -1}));
  }
  return v;
}

/// The arguments every layer has, read by Layer's one reader: tried on the first sample only.
const std::set<std::string> kCommon = {"trainable", "dtype"};

/// JSON pointers to every argument of a layer config `c` below `at`: each key but the name (and
/// the common ones unless `common`), the first elements of a list, and the keys of a nested object
/// (an initializer's class_name and config).
void collect(const json& c, const json::json_pointer& at, bool nested, bool common,
             std::vector<std::pair<json::json_pointer, bool>>& out) {
  for (const auto& [key, value] : c.items()) {
    if (!nested && (key == "name" || (!common && kCommon.count(key)))) continue;  // the graph refers to the name
    const json::json_pointer p = at / key;
    out.emplace_back(p, false);
    if (value.is_array())
      for (std::size_t i = 0; i < value.size() && i < 3; ++i) out.emplace_back(p / i, true);
    if (value.is_object() && !nested) collect(value, p, true, common, out);
  }
}

/// The sample's model, made afresh.
std::unique_ptr<Functional> model_of(const Sample& s) {
  std::vector<KerasTensor> ins;
  for (int i = 0; i < s.inputs; ++i) ins.push_back(Input(s.input));
  const L::LayerPtr layer = s.make();
  const KerasTensor out = s.inputs == 1 ? call(layer, ins[0]) : call(layer, ins);
  return std::make_unique<Functional>(ins, KerasTensors{out}, "inputs");
}

std::vector<Tensor> inputs_of(const Sample& s, std::vector<std::int64_t> dims) {
  std::vector<Tensor> xs;
  for (int i = 0; i < s.inputs; ++i) xs.push_back(test::random_uniform(Shape(dims), 11 + i, 0.0f, 1.0f));
  return xs;
}

/// Whether `value` is of another kind than `was`, the argument's value: numbers are one kind (an
/// integer where a float was is a value, not a type), and Keras takes a number for a list of them
/// (a size alike along every dimension).
bool another_kind(const json& value, const json& was) {
  if (value.is_number()) return !was.is_number() && !was.is_array();
  return value.type() != was.type();
}

class HostileLayerConfig : public ::testing::TestWithParam<Sample> {};

TEST_P(HostileLayerConfig, AnyValueOfAnyArgumentIsAClearErrorOrAModelThatRuns) {
  const Sample& s = GetParam();
  const std::string dir = test::fresh_test_dir("keras_hostile_layers", s.cls);
  std::filesystem::create_directories(dir);
  auto made = model_of(s);
  Functional& model = *made;
  const L::LayerPtr layer = model.layers().back();
  ASSERT_EQ(layer->class_name(), s.cls);
  const std::string good = dir + "/good.keras";
  save_model(model, good);
  std::vector<io::ZipEntry> entries = io::decode_zip(io::read_file(good), "good.keras");
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  json::json_pointer layer_at;
  for (std::size_t i = 0; i < config["config"]["layers"].size(); ++i)
    if (config["config"]["layers"][i]["config"]["name"] == layer->name())
      layer_at = json::json_pointer("/config/layers") / i / "config";
  ASSERT_FALSE(layer_at.empty()) << config.dump();

  std::vector<Tensor> xs;
  std::vector<std::int64_t> dims{2};
  for (std::int64_t d : s.input.dims()) dims.push_back(d);
  for (int i = 0; i < s.inputs; ++i) xs.push_back(test::random_uniform(Shape(dims), 5 + i, 0.0f, 1.0f));

  std::vector<std::pair<json::json_pointer, bool>> arguments;
  collect(config.at(layer_at), layer_at, false, s.cls == samples().front().cls, arguments);
  int loaded = 0, refused = 0;
  for (const auto& [at, element] : arguments)
    for (const json& value : hostile_values(element)) {
      json bad = config;
      bad[at] = value;
      auto copy = entries;
      for (auto& e : copy)
        if (e.name == "config.json") e.bytes = bad.dump();
      const std::string path = dir + "/bad.keras";
      io::write_file_atomic(path, io::encode_zip(copy));
      const std::string what = at.to_string().substr(layer_at.to_string().size()) + " = " + value.dump();
      std::unique_ptr<Model> m;
      try {
        m = load_model(path);
      } catch (const IOError& e) {
        ++refused;
        const std::string message = e.what();
        EXPECT_NE(message.find("bad.keras"), std::string::npos)
            << s.cls << " " << what << ": the message does not name the file: " << message;
        // Never the JSON library's words; a value of another type than the argument's (or its
        // list's element's) is refused naming the argument.
        EXPECT_EQ(message.find("json.exception"), std::string::npos)
            << s.cls << " " << what << ": the message is the JSON library's: " << message;
        const std::string argument = at.to_string().substr(layer_at.to_string().size() + 1);
        const std::string key = argument.substr(0, argument.find('/'));
        const bool own = argument == key || element;  // not a key of a nested object
        if (own && another_kind(value, config.at(at))) {
          EXPECT_NE(message.find(key), std::string::npos)
              << s.cls << " " << what << ": the message does not name the argument: " << message;
        }
        continue;
      } catch (const std::exception& e) {
        ADD_FAILURE() << s.cls << " " << what << ": loading threw something other than an IOError: " << e.what();
        continue;
      }
      ++loaded;
      try {
        (void)m->predict(xs);
      } catch (const Error&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << s.cls << " " << what << ": predict threw something other than lockstep's error: " << e.what();
      }
    }
  // Some values of the layer's arguments, where it has any, were refused.
  if (!arguments.empty()) {
    EXPECT_GT(refused, 0) << s.cls;
  }
  RecordProperty("loaded", loaded);
  RecordProperty("refused", refused);
}

// Inputs a model was not built for (a rank more or less, an inner size changed, NaN values) are
// lockstep's error, or run; so is an empty batch.
TEST_P(HostileLayerConfig, WrongInputsAreAClearErrorOrRun) {
  const Sample& s = GetParam();
  auto model = model_of(s);
  std::vector<std::int64_t> dims{3};
  for (std::int64_t d : s.input.dims()) dims.push_back(d);
  std::vector<std::vector<std::int64_t>> wrong;
  wrong.push_back(std::vector<std::int64_t>(dims.begin(), dims.end() - 1));  // a rank less
  auto more = dims;
  more.push_back(2);  // a rank more
  wrong.push_back(more);
  for (std::size_t axis = 1; axis < dims.size(); ++axis) {
    auto changed = dims;
    changed[axis] += 1;
    wrong.push_back(changed);
  }
  for (const auto& w : wrong) {
    std::stringstream what;
    for (std::int64_t d : w) what << d << " ";
    try {
      (void)model->predict(inputs_of(s, w));
    } catch (const Error& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    } catch (const std::exception& e) {
      ADD_FAILURE() << s.cls << " on inputs of shape (" << what.str() << "): not lockstep's error: " << e.what();
    }
  }
  std::vector<Tensor> nan = inputs_of(s, dims);
  for (Tensor& x : nan) x.fill_(std::nan(""));
  try {
    (void)model->predict(nan);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << s.cls << " on NaN inputs: not lockstep's error: " << e.what();
  }
  // Keras' predict refuses an empty input ("Empty batch_outputs"); lockstep runs it or says so.
  auto empty = dims;
  empty[0] = 0;
  try {
    const std::vector<Tensor> out = model->predict(inputs_of(s, empty));
    ASSERT_EQ(out.size(), 1u) << s.cls;
    EXPECT_EQ(out[0].dim(0), 0) << s.cls << ": an empty batch gives " << out[0].shape().str();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << s.cls << " on an empty batch: not lockstep's error: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLayerClass, HostileLayerConfig, ::testing::ValuesIn(samples()),
                         [](const ::testing::TestParamInfo<Sample>& info) { return info.param.cls; });

// The table above holds every class lockstep registers, so that a new layer is tried too.
TEST(HostileLayerConfigTable, HoldsEveryRegisteredLayerClass) {
  std::set<std::string> tried;
  for (const Sample& s : samples()) tried.insert(s.cls);
  std::stringstream names(layers::layer_class_names());
  for (std::string name; std::getline(names, name, ',');) {
    name.erase(0, name.find_first_not_of(' '));
    if (name == "InputLayer" || name.rfind("Test", 0) == 0) continue;  // the model's input; test-registered classes
    EXPECT_TRUE(tried.count(name)) << "no hostile-config sample for the layer class " << name;
  }
}

}  // namespace
}  // namespace lockstep
