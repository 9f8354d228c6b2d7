// tf.data.Dataset's transformations on lockstep's data::Dataset, and keras.datasets' loaders.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "lockstep/data/dataset.hpp"
#include "lockstep/datasets/fashion_mnist.hpp"
#include "lockstep/datasets/mnist.hpp"

namespace lockstep::python {

namespace {
using data::Dataset;

// ((x_train, y_train), (x_test, y_test)) as NumPy arrays, as keras.datasets' load_data().
nb::tuple train_test_arrays(const datasets::TrainTest& tt) {
  return nb::make_tuple(nb::make_tuple(array_from_tensor(tt.train.x), array_from_tensor(tt.train.y)),
                        nb::make_tuple(array_from_tensor(tt.test.x), array_from_tensor(tt.test.y)));
}

// A Python function mapped over a dataset: called on the pipeline's threads with the GIL taken
// there, on the element's components as tensors; it returns a tensor (or NumPy array, or number)
// or a tuple of them. Its exception ends the pass and reaches the caller as it was (module.cpp).
// The pipeline may let go of it on any thread: the GIL is taken for that too.
class PythonMapFunction {
 public:
  explicit PythonMapFunction(nb::callable fn) : fn_(std::move(fn)) {}
  ~PythonMapFunction() {
    nb::gil_scoped_acquire acquire;
    fn_.reset();
  }
  data::Element operator()(const data::Element& element) const {
    nb::gil_scoped_acquire acquire;
    const nb::object out = fn_(nb::cast(element));
    data::Element result;
    for (nb::handle component : out) result.push_back(as_tensor(component, "the function of Dataset.map"));
    return result;
  }

 private:
  nb::callable fn_;
};

// One pass over a dataset, its elements as lists of NumPy arrays (the GIL is released while
// the pipeline starts, reads and stops: its threads may be waiting for the GIL in a map).
class ElementIterator {
 public:
  explicit ElementIterator(const Dataset& ds) : it_(start_pipeline(ds)) {}
  std::vector<NumpyArray> next() {
    std::optional<data::Element> e;
    {
      nb::gil_scoped_release release;
      e = it_->next();
    }
    if (!e) throw nb::stop_iteration();
    std::vector<NumpyArray> out;
    for (const auto& t : *e) out.push_back(array_from_tensor(t));
    return out;
  }

 private:
  PipelinePtr<data::Iterator> it_;
};
}  // namespace

void bind_data(nb::module_& m) {
  nb::class_<ElementIterator>(m, "ElementIterator")
      .def("__iter__", [](ElementIterator& it) -> ElementIterator& { return it; }, nb::rv_policy::reference)
      .def("__next__", &ElementIterator::next);

  nb::class_<Dataset>(m, "Dataset")
      .def_static(
          "from_tensor_slices",
          [](const std::vector<HostArray>& arrays) {
            std::vector<Tensor> components;
            for (const auto& a : arrays) components.push_back(tensor_from_array(a, "Dataset.from_tensor_slices"));
            return Dataset::from_tensor_slices(std::move(components));
          },
          nb::arg("arrays"))
      .def_static("range", [](std::int64_t start, std::int64_t stop, std::int64_t step) {
        return Dataset::range(start, stop, step);
      })
      .def("shuffle", &Dataset::shuffle, nb::arg("buffer_size"), nb::arg("seed") = 0,
           nb::arg("reshuffle_each_iteration") = true)
      .def("batch", &Dataset::batch, nb::arg("batch_size"), nb::arg("drop_remainder") = false)
      .def("repeat", &Dataset::repeat, nb::arg("count") = -1)
      .def("take", &Dataset::take, nb::arg("count"))
      .def("skip", &Dataset::skip, nb::arg("count"))
      .def("shard", &Dataset::shard, nb::arg("num_shards"), nb::arg("index"))
      .def("unbatch", &Dataset::unbatch)
      .def("concatenate", &Dataset::concatenate, nb::arg("other"))
      .def("cache", nb::overload_cast<>(&Dataset::cache, nb::const_))
      .def("cache", nb::overload_cast<const std::string&>(&Dataset::cache, nb::const_), nb::arg("filename"))
      .def("prefetch", &Dataset::prefetch, nb::arg("buffer_size"))
      .def("map_python", [](const Dataset& ds, nb::callable fn, std::int64_t num_parallel_calls, bool deterministic) {
        auto call = std::make_shared<PythonMapFunction>(std::move(fn));
        return ds.map([call](data::Element e) { return (*call)(e); }, num_parallel_calls, deterministic);
      }, nb::arg("fn"), nb::arg("num_parallel_calls") = 1, nb::arg("deterministic") = true)
      .def("cardinality", &Dataset::cardinality)
      .def("__iter__", [](const Dataset& ds) { return ElementIterator(ds); });
  m.attr("AUTOTUNE") = data::kAutotune;
  m.attr("INFINITE_CARDINALITY") = data::kInfiniteCardinality;
  m.attr("UNKNOWN_CARDINALITY") = data::kUnknownCardinality;

  m.def("mnist_load_data", [](std::optional<std::string> dir) {
    return train_test_arrays(dir ? datasets::mnist::load_data(*dir) : datasets::mnist::load_data());
  }, nb::arg("dir") = nb::none());
  m.def("fashion_mnist_load_data", [](std::optional<std::string> dir) {
    return train_test_arrays(dir ? datasets::fashion_mnist::load_data(*dir) : datasets::fashion_mnist::load_data());
  }, nb::arg("dir") = nb::none());
}

}  // namespace lockstep::python
