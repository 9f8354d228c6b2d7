// lockstep's side of tests/reference/keras_files.py (Keras 3 files in both directions):
//   keras_files_driver train mlp|cnn|resnet20|rnn OUT.keras X.npy Y.npy   train briefly, save as .keras
//   keras_files_driver resave IN.keras OUT.keras             load a Keras-made file, save it again
//   keras_files_driver load-weights MODEL.keras W.weights.h5 X.npy OUT.npy
//                                                            load a model, then Keras' save_weights
//                                                            file into it; write its predictions
//   keras_files_driver multi-train OUT.keras IMAGE.npy TAB.npy CLS.npy REG.npy
//                                                            a model of two inputs and two outputs
//                                                            (dicts), trained briefly, saved
//   keras_files_driver multi-predict MODEL.keras X.npy... OUT_PREFIX
//                                                            (an input each) each output's
//                                                            predictions to OUT_PREFIX<output name>.npy
//   keras_files_driver trainable MODEL.keras                 each layer's name and trainable
//                                                            setting (true / false), a line each
//   keras_files_driver optimizer-train OUT.keras X.npy Y.npy [--mixed]
//                                                            an Adam mlp trained 6 steps (batch 8, in
//                                                            order), saved with its optimizer's state
//   keras_files_driver optimizer-continue IN.keras X.npy Y.npy OUT.keras [--mixed]
//                                                            load, train 6 steps more, save
//   keras_files_driver optimizer-resave IN.keras OUT.keras [--mixed]
//                                                            load (compiled), save again
//   keras_files_driver evaluate MODEL.keras X.npy Y.npy OUT.json
//                                                            load (compiled), evaluate in batches of
//                                                            8, write the logs as {name: value}
//   (--mixed: under the mixed_float16 policy, so that compile wraps the optimizer in a
//   LossScaleOptimizer, as Keras' does)
//   keras_files_driver weighted IN.keras X.npy Y.npy W.npy CLASS:WEIGHT,... OUT_DIR
//                                                            IN evaluated with sample_weight W (batch
//                                                            8; the loss to OUT_DIR/evaluate_loss.txt),
//                                                            and trained an epoch (batch 8, in order)
//                                                            with W and with the class weights, saved
//                                                            as OUT_DIR/sample_weight.keras and
//                                                            class_weight.keras (each fit's loss to
//                                                            OUT_DIR/<name>_loss.txt); the logs as
//                                                            JSON: evaluate_logs.json and
//                                                            sample_weight_history.json
//   keras_files_driver multi-evaluate-weighted IN.keras IMAGE.npy TAB.npy CLS.npy REG.npy W_CLS.npy W_REG.npy OUT.json
//                                                            IN (two inputs, outputs cls and reg)
//                                                            evaluated (batch 8) with one sample weight
//                                                            array per output; the logs as JSON to OUT
//   keras_files_driver sequence IN.keras X.npy Y.npy W.npy OUT_DIR
//                                                            a sequence model (a loss per step, masks)
//                                                            evaluated (batch 8) without and with the
//                                                            sample weights W, one per step (logs to
//                                                            OUT_DIR/evaluate_plain.json and
//                                                            evaluate_weighted.json), then trained an
//                                                            epoch with W (batch 8, in order; its
//                                                            history to fit_history.json), saved as
//                                                            OUT_DIR/trained.keras
//   keras_files_driver affine-transform IMAGES.npy TRANSFORMS.npy INTERPOLATION FILL_MODE FILL_VALUE OUT.npy
//                                                            layers::affine_transform of the images
//                                                            (keras.ops.image.affine_transform's
//                                                            arguments), written to OUT
// Errors: message on stderr, exit 1.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "lockstep/layers/affine_transform.hpp"
#include "lockstep/lockstep.hpp"

namespace {
using namespace lockstep;

std::unique_ptr<Model> make(const std::string& kind, const Shape& example) {
  if (kind == "resnet20") {
    auto m = applications::ResNet20({.input_shape = example, .classes = 3, .name = "lockstep_resnet20"});
    m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    return m;
  }
  std::vector<layers::LayerPtr> l{layers::Input(example)};
  if (kind == "mlp") {
    l.insert(l.end(), {layers::Flatten(), layers::Dense(16, "relu"), layers::BatchNormalization(), layers::Dropout(0.2f),
                       layers::Dense(3, "softmax")});
  } else if (kind == "rnn") {  // tokens [b, steps], 0 padding: every recurrent layer (keras_rnn.py)
    layers::RecurrentOptions gru{.units = 5, .return_sequences = true, .go_backwards = true};
    gru.reset_after = false;
    l.insert(l.end(), {layers::Embedding(9, 6, true), layers::SimpleRNN({.units = 6, .return_sequences = true}),
                       layers::GRU(gru), layers::LSTM({.units = 5, .return_sequences = true, .dropout = 0.2f, .recurrent_dropout = 0.1f}),
                       layers::GRU(4), layers::Dense(3, "softmax")});
  } else {
    l.insert(l.end(), {layers::Rescaling(0.5f), layers::ZeroPadding2D(),
                       layers::Conv2D({.filters = 6, .kernel_size = {3, 3}, .activation = "relu"}),
                       layers::BatchNormalization({.momentum = 0.9f}),
                       layers::DepthwiseConv2D({.kernel_size = {3, 3}, .padding = "same", .depth_multiplier = 2}),
                       layers::MaxPooling2D(), layers::AveragePooling2D({2, 2}, layers::Pair{1, 1}, "same"),
                       layers::Conv2D({.filters = 4, .kernel_size = {2, 2}, .strides = {2, 2}, .padding = "same",
                                       .activation = "tanh"}),
                       layers::GlobalAveragePooling2D(), layers::Dropout(0.1f), layers::Dense(3, "softmax")});
  }
  auto m = std::make_unique<Sequential>(l, "lockstep_" + kind);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}
// image + tab -> cls (softmax) and reg, as dicts.
std::unique_ptr<Model> make_two_by_two(const Shape& image, const Shape& tab) {
  const KerasTensor in_image = Input(image, "image"), in_tab = Input(tab, "tab");
  const KerasTensor flat = call(layers::Flatten(), in_image);
  const KerasTensor h = call(layers::Dense(16, "relu"), call(layers::Concatenate(), {flat, in_tab}));
  auto cls_layer = layers::Dense(3, "softmax"), reg_layer = layers::Dense(1);
  cls_layer->set_name("cls");
  reg_layer->set_name("reg");
  auto m = std::make_unique<Functional>(KerasTensors{{"image", in_image}, {"tab", in_tab}},
                                        KerasTensors{{"cls", call(cls_layer, h)}, {"reg", call(reg_layer, h)}},
                                        "lockstep_two_by_two");
  m->compile(optimizers::Adam(1e-2),
             {{"cls", losses::SparseCategoricalCrossentropy()}, {"reg", losses::MeanSquaredError()}},
             {{"cls", {"accuracy"}}, {"reg", {"mae"}}}, {{"cls", 1.0}, {"reg", 0.5}});
  return m;
}
// The optimizer tests' model: Dense(8, relu) -> Dense(3, softmax), Adam(1e-2).
std::unique_ptr<Model> make_optimizer_mlp(const Shape& example) {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Input(example), layers::Dense(8, "relu"), layers::Dense(3, "softmax")},
      "lockstep_optimizer_mlp");
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}
void write_number(const std::string& path, double value) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw IOError("cannot write " + path);
  std::fprintf(f, "%.9g\n", value);
  std::fclose(f);
}
void write_json(const std::string& path, const nlohmann::json& j) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw IOError("cannot write " + path);
  std::fprintf(f, "%s\n", j.dump().c_str());
  std::fclose(f);
}
// "0:0.5,2:3" -> {0: 0.5, 2: 3}.
std::map<int, double> parse_class_weight(const std::string& text) {
  std::map<int, double> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string pair = text.substr(at, comma - at);
    const std::size_t colon = pair.find(':');
    out[std::stoi(pair.substr(0, colon))] = std::stod(pair.substr(colon + 1));
    at = comma + 1;
  }
  return out;
}
void fit_six_steps(Model& m, const std::string& x, const std::string& y) {
  m.fit(data::read_npy(x), data::read_npy(y), {.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0});
}
}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 5 && a[0] == "train") {
      const Tensor x = data::read_npy(a[3]), y = data::read_npy(a[4]);
      auto m = make(a[1], x.shape().tail());
      m->fit(x, y, {.epochs = 3, .batch_size = 16, .verbose = 0});
      save_model(*m, a[2]);
    } else if (a.size() == 7 && a[0] == "affine-transform") {
      data::write_npy(a[6], layers::affine_transform(data::read_npy(a[1]), data::read_npy(a[2]),
                                                     layers::parse_interpolation(a[3], "affine-transform"),
                                                     layers::parse_fill_mode(a[4], "affine-transform"),
                                                     std::stof(a[5])));
    } else if (a.size() == 3 && a[0] == "resave") {
      save_model(*load_model(a[1]), a[2]);
    } else if (a.size() == 5 && a[0] == "load-weights") {
      auto m = load_model(a[1]);
      for (auto& v : m->variables()) v.assign(Tensor::zeros(v.value().shape()));  // only the file's values count
      load_weights(*m, a[2]);
      data::write_npy(a[4], m->predict(data::read_npy(a[3])));
    } else if (a.size() == 6 && a[0] == "multi-train") {
      const Tensor image = data::read_npy(a[2]), tab = data::read_npy(a[3]);
      auto m = make_two_by_two(image.shape().tail(), tab.shape().tail());
      m->fit({image, tab}, {data::read_npy(a[4]), data::read_npy(a[5])}, {.epochs = 3, .batch_size = 16, .verbose = 0});
      save_model(*m, a[1]);
    } else if (a.size() >= 4 && a[0] == "multi-predict") {
      auto m = load_model(a[1]);
      std::vector<Tensor> xs;
      for (std::size_t i = 2; i + 1 < a.size(); ++i) xs.push_back(data::read_npy(a[i]));
      const std::vector<Tensor> outs = m->predict(xs);
      for (std::size_t k = 0; k < outs.size(); ++k)
        data::write_npy(a.back() + m->output_structure().names[k] + ".npy", outs[k]);
    } else if (a.size() == 9 && a[0] == "multi-evaluate-weighted") {
      auto m = load_model(a[1]);
      EvaluateOptions o{.batch_size = 8};
      o.sample_weights = {data::read_npy(a[6]), data::read_npy(a[7])};
      write_json(a[8], nlohmann::json(m->evaluate(std::vector<Tensor>{data::read_npy(a[2]), data::read_npy(a[3])},
                                                  std::vector<Tensor>{data::read_npy(a[4]), data::read_npy(a[5])}, o)));
    } else if (a.size() == 2 && a[0] == "trainable") {
      const auto m = load_model(a[1]);  // held: a range-for's temporary owner would free the layers first
      for (const auto& l : m->layers())
        if (l->class_name() != "InputLayer") std::printf("%s %s\n", l->name().c_str(), l->trainable() ? "true" : "false");
    } else if ((a.size() == 4 || a.size() == 5) && a[0] == "optimizer-train") {
      if (a.size() == 5) mixed_precision::set_global_policy("mixed_float16");
      auto m = make_optimizer_mlp(data::read_npy(a[2]).shape().tail());
      fit_six_steps(*m, a[2], a[3]);
      save_model(*m, a[1]);
    } else if ((a.size() == 5 || a.size() == 6) && a[0] == "optimizer-continue") {
      if (a.size() == 6) mixed_precision::set_global_policy("mixed_float16");
      auto m = load_model(a[1]);
      fit_six_steps(*m, a[2], a[3]);
      save_model(*m, a[4]);
    } else if ((a.size() == 3 || a.size() == 4) && a[0] == "optimizer-resave") {
      if (a.size() == 4) mixed_precision::set_global_policy("mixed_float16");
      save_model(*load_model(a[1]), a[2]);
    } else if (a.size() == 7 && a[0] == "weighted") {
      const Tensor x = data::read_npy(a[2]), y = data::read_npy(a[3]), w = data::read_npy(a[4]);
      const std::string out = a[6];
      const Logs evaluated = load_model(a[1])->evaluate(x, y, {.batch_size = 8, .sample_weight = w});
      write_number(out + "/evaluate_loss.txt", evaluated.at("loss"));
      write_json(out + "/evaluate_logs.json", nlohmann::json(evaluated));
      FitOptions o{.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0};
      o.sample_weight = w;
      auto by_example = load_model(a[1]);
      const History h = by_example->fit(x, y, o);
      write_number(out + "/sample_weight_loss.txt", h.history.at("loss").back());
      write_json(out + "/sample_weight_history.json", nlohmann::json(h.history));
      save_model(*by_example, out + "/sample_weight.keras");
      o.sample_weight = Tensor();
      o.class_weight = parse_class_weight(a[5]);
      auto by_class = load_model(a[1]);
      write_number(out + "/class_weight_loss.txt", by_class->fit(x, y, o).history.at("loss").back());
      save_model(*by_class, out + "/class_weight.keras");
    } else if (a.size() == 6 && a[0] == "sequence") {
      const Tensor x = data::read_npy(a[2]), y = data::read_npy(a[3]), w = data::read_npy(a[4]);
      const std::string out = a[5];
      const auto m = load_model(a[1]);
      write_json(out + "/evaluate_plain.json", nlohmann::json(m->evaluate(x, y, {.batch_size = 8})));
      write_json(out + "/evaluate_weighted.json",
                 nlohmann::json(m->evaluate(x, y, {.batch_size = 8, .sample_weight = w})));
      FitOptions o{.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0};
      o.sample_weight = w;
      write_json(out + "/fit_history.json", nlohmann::json(m->fit(x, y, o).history));
      save_model(*m, out + "/trained.keras");
    } else if (a.size() == 5 && a[0] == "evaluate") {
      const auto m = load_model(a[1]);
      write_json(a[4], nlohmann::json(m->evaluate(data::read_npy(a[2]), data::read_npy(a[3]), {.batch_size = 8})));
    } else {
      std::fprintf(stderr, "usage: see the header of keras_files_driver.cpp\n");
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
