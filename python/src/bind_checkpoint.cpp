// tf.train.Checkpoint / CheckpointManager / latest_checkpoint on lockstep's checkpoints
// (io/checkpoint_manager.hpp: numbered <dir>/<name>-<n> pairs and a `checkpoint` pointer file;
// training/checkpointing.hpp: the optimizer's state and a verified load).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/training/checkpointing.hpp"

namespace lockstep::python {

void bind_checkpoint(nb::module_& m) {
  nb::class_<io::CheckpointManager>(m, "CheckpointManager")
      .def("__init__", [](io::CheckpointManager* self, std::string directory, int max_to_keep, std::string name) {
        new (self) io::CheckpointManager(std::move(directory), {.max_to_keep = max_to_keep, .name = std::move(name)});
      }, nb::arg("directory"), nb::arg("max_to_keep"), nb::arg("name"))
      // Saves the variables and the optimizer's slots and step count (optimizer may be None);
      // only the chief worker writes (the others return "").
      .def("save", [](io::CheckpointManager& cm, const std::vector<Variable>& variables,
                      optimizers::Optimizer* optimizer, bool is_chief) {
        TrainingState state;
        add_optimizer_state(state, optimizer);
        nb::gil_scoped_release release;
        return cm.save(variables, optimizer, state, {.is_chief = is_chief});
      }, nb::arg("variables"), nb::arg("optimizer").none(), nb::arg("is_chief"))
      .def_prop_ro("latest", &io::CheckpointManager::latest)
      .def_prop_ro("checkpoints", &io::CheckpointManager::checkpoints)
      .def_prop_ro("directory", &io::CheckpointManager::directory);
  // Verifies the whole checkpoint against the variables (and the optimizer's slots) before assigning.
  m.def("load_checkpoint", [](const std::string& prefix, const std::vector<Variable>& variables,
                              optimizers::Optimizer* optimizer) {
    nb::gil_scoped_release release;
    (void)load_checkpoint_into(prefix, variables, optimizer);
  }, nb::arg("prefix"), nb::arg("variables"), nb::arg("optimizer").none());
}

}  // namespace lockstep::python
