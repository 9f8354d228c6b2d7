// Deep functional graphs from files (issue 41, item 3): a chain of 16,000 calls of one shared
// layer overflowed the stack in the model's recursive graph walk, and chains of distinct layers
// loaded in quadratic time. Each load here must end (loaded, or refused by name) in bounded time.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/error_message.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/lockstep.hpp"
#include "common/cpu_time.hpp"

namespace lockstep {
namespace {
using nlohmann::json;

// One folder per test: ctest runs them in parallel, and each removes its own at the end.
std::string test_dir() {
  const char* test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "deep_graph" / test).string();
  std::filesystem::create_directories(dir);
  return dir;
}

json tensor_ref(const std::string& layer, int node) {
  return {{"class_name", "__keras_tensor__"},
          {"config", {{"shape", {nullptr, 4}}, {"dtype", "float32"}, {"keras_history", {layer, node, 0}}}}};
}

json activation(const std::string& name, json inbound) {
  return {{"module", "keras.layers"},
          {"class_name", "Activation"},
          {"config", {{"name", name}, {"trainable", true}, {"dtype", "float32"}, {"activation", "relu"}}},
          {"registered_name", nullptr},
          {"name", name},
          {"inbound_nodes", std::move(inbound)}};
}

json call_of(const std::string& layer, int node) {
  return {{"args", {tensor_ref(layer, node)}}, {"kwargs", json::object()}};
}

// A .keras file: the archive of a saved Input -> Activation model with its config.json's layers
// replaced (Activation has no weights, so the weights file fits any such graph).
std::string keras_file(const std::string& name, json layer_list, const json& output) {
  const std::string path = test_dir() + "/" + name + ".keras";
  const KerasTensor in = Input({4}, "input");
  Functional seed_model(in, call(layers::Activation("relu"), in));
  save_model(seed_model, path);
  auto entries = io::decode_zip(io::read_file(path), path);
  auto& config = *std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.name == "config.json"; });
  auto j = json::parse(config.bytes);
  auto& layer_json = j["config"]["layers"];
  layer_list.insert(layer_list.begin(), layer_json[0]);  // the InputLayer, named "input"
  layer_json = std::move(layer_list);
  j["config"]["input_layers"] = {"input", 0, 0};
  j["config"]["output_layers"] = output;
  config.bytes = j.dump();
  io::write_file_atomic(path, io::encode_zip(entries));
  return path;
}

// One shared Activation called `calls` times in a chain.
std::string shared_chain(const std::string& name, int calls) {
  json inbound = json::array({call_of("input", 0)});
  for (int k = 1; k < calls; ++k) inbound.push_back(call_of("act", k - 1));
  return keras_file(name, json::array({activation("act", inbound)}), {"act", calls - 1, 0});
}

// Layer k of a chain of distinct layers (appended, not "a" + to_string: GCC 12 warns there).
std::string layer_name(int k) {
  std::string name = std::to_string(k);
  name.insert(name.begin(), 'a');
  return name;
}

// `count` distinct Activations in a chain, listed in the file in order or in reverse.
std::string distinct_chain(const std::string& name, int count, bool reversed) {
  json list = json::array();
  for (int k = 0; k < count; ++k)
    list.push_back(activation(layer_name(k), json::array({k == 0 ? call_of("input", 0) : call_of(layer_name(k - 1), 0)})));
  if (reversed) std::reverse(list.begin(), list.end());
  return keras_file(name, list, {layer_name(count - 1), 0, 0});
}

// The work a load or save did: CPU seconds of this thread (a loaded machine does not inflate them).
double seconds_of(const std::function<void()>& f) { return test::thread_cpu_seconds_of(f); }

// The file of the issue (16,000 calls, 425 KB) took the process down with SIGSEGV.
TEST(DeepGraph, ASharedLayerCalled16000TimesInAChainLoadsRunsAndSavesQuickly) {
  const std::string path = shared_chain("shared16000", 16000);
  std::unique_ptr<Model> model;
  const double load_s = seconds_of([&] { model = load_model(path); });
  EXPECT_LT(load_s, 5.0);
  auto* f = dynamic_cast<Functional*>(model.get());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->nodes().size(), 16001u);
  EXPECT_EQ(f->layers().size(), 2u);
  const Tensor x = Tensor::from_vector<float>({1.f, -2.f, 3.f, -4.f}, {1, 4});
  EXPECT_EQ(model->predict(x).to_vector<float>(), (std::vector<float>{1.f, 0.f, 3.f, 0.f}));
  const double save_s = seconds_of([&] {
    save_model(*model, test_dir() + "/shared16000_again.keras");
    EXPECT_NE(model->summary().find("act[15998][0]"), std::string::npos);
  });
  EXPECT_LT(save_s, 5.0);
  std::filesystem::remove_all(test_dir());  // tens of MB
}

// 30,000 distinct layers took 85 s and then crashed; listed in reverse, every pass over the
// layers made one call.
TEST(DeepGraph, A30000LayerChainLoadsInLinearTimeInEitherOrder) {
  for (const bool reversed : {false, true}) {
    const std::string path = distinct_chain(reversed ? "distinct_reversed" : "distinct", 30000, reversed);
    std::unique_ptr<Model> model;
    const double load_s = seconds_of([&] { model = load_model(path); });
    EXPECT_LT(load_s, 10.0) << (reversed ? "reversed" : "in order");
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->layers().size(), 30001u);
    EXPECT_EQ(model->layers().back()->name(), "a29999");
    EXPECT_EQ(model->predict(Tensor::from_vector<float>({-1.f, 2.f, -3.f, 4.f}, {1, 4})).to_vector<float>(),
              (std::vector<float>{0.f, 2.f, 0.f, 4.f}));
    if (!reversed) {
      EXPECT_LT(seconds_of([&] { save_model(*model, test_dir() + "/distinct_again.keras"); }), 10.0);
    }
  }
  std::filesystem::remove_all(test_dir());  // tens of MB
}

TEST(DeepGraph, AGraphOverTheBoundIsRefusedNamingTheFileAndTheBound) {
  const int calls = static_cast<int>(Functional::kMaxNodes) + 1;
  const std::string path = shared_chain("over_bound", calls);
  const double s = seconds_of([&] {
    try {
      load_model(path);
      ADD_FAILURE() << "no error";
    } catch (const IOError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("over_bound.keras"), std::string::npos) << what;
      EXPECT_NE(what.find("has 100002 layer calls (nodes) in 2 layers, more than lockstep's bound of 100000"),
                std::string::npos)
          << what;
    }
  });
  EXPECT_LT(s, 10.0);
  std::filesystem::remove_all(test_dir());
}

// Calls that wait on each other (a cycle, or a call on its own output) can never be made: named,
// not waited on forever.
TEST(DeepGraph, CallsThatWaitOnEachOtherAreRefusedNamingTheLayer) {
  const json cycle = json::array({activation("act", json::array({call_of("act", 1), call_of("act", 0)}))});
  const json self = json::array({activation("act", json::array({call_of("act", 0)}))});
  for (const auto& [name, layer_list] : {std::pair{"cycle", cycle}, std::pair{"self", self}}) {
    const std::string path = keras_file(name, layer_list, {"act", 0, 0});
    try {
      load_model(path);
      ADD_FAILURE() << name << ": no error";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(name) + ".keras': layer 'act': call 0 takes a tensor that no "
                                                               "layer of the model makes"),
                std::string::npos)
          << e.what();
    }
  }
  std::filesystem::remove_all(test_dir());
}

// Built in code rather than read, the same bound holds, named by the model, and a chain just
// under it is a model (made and let go without recursion).
TEST(DeepGraph, ACodeBuiltGraphOverTheBoundIsRefusedAndOneUnderItIsAModel) {
  const KerasTensor in = Input({2});
  const auto relu = layers::Activation("relu");
  KerasTensor x = in;
  for (std::size_t k = 1; k < Functional::kMaxNodes; ++k) x = call(relu, x);
  EXPECT_EQ(Functional(in, x, "deepest").nodes().size(), Functional::kMaxNodes);
  x = call(relu, x);
  EXPECT_NE(test::message_of([&] { Functional(in, x, "too_deep"); })
                .find("Functional 'too_deep': the graph has more than 100000 layer calls (nodes)"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep
