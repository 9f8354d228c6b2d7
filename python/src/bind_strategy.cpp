// tf.distribute's strategies: lockstep's Strategy objects and their scope() guards.
#include <memory>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <vector>

#include "arrays.hpp"
#include "lockstep/distribute/strategy.hpp"

namespace lockstep::python {

void bind_strategy(nb::module_& m) {
  nb::class_<PyStrategy>(m, "Strategy")
      .def_prop_ro("name", [](const PyStrategy& s) { return s.strategy->name(); })
      .def_prop_ro("num_replicas_in_sync", [](const PyStrategy& s) { return s.strategy->num_replicas_in_sync(); })
      .def_prop_ro("devices", [](const PyStrategy& s) {
        std::vector<std::string> names;
        for (const auto& d : s.strategy->devices()) names.push_back(d.str());
        return names;
      })
      .def("enter_scope", [](PyStrategy& s) {
        s.scopes.push_back(std::make_unique<distribute::StrategyScope>(*s.strategy));
      })
      .def("exit_scope", [](PyStrategy& s) {
        if (!s.scopes.empty()) s.scopes.pop_back();
      });

  m.def("mirrored_strategy", [](const std::vector<std::string>& devices) {
    return PyStrategy{std::make_unique<distribute::MirroredStrategy>(distribute::MirroredOptions{.devices = devices}), {}};
  }, nb::arg("devices") = std::vector<std::string>{});
  m.def("one_device_strategy", [](const std::string& device) {
    return PyStrategy{std::make_unique<distribute::OneDeviceStrategy>(device), {}};
  }, nb::arg("device") = "cpu:0");
  m.def("multi_worker_mirrored_strategy", []() {
    return PyStrategy{std::make_unique<distribute::MultiWorkerMirroredStrategy>(), {}};
  });
}

}  // namespace lockstep::python
