#pragma once
// How a model's inputs or outputs are nested, as Keras nests them: one tensor, a list, or a dict.
// The one owner of that idea: a model says its inputs' and outputs' Structure; fit / evaluate /
// predict, compile's per-output losses and metrics, the logs' names and the .keras config all ask it.
//
// Entries are flat in one order, the order of a dataset element's components (inputs, then
// targets) and of predict's outputs: a list's order, or a dict's keys sorted (Keras' tree.flatten).
// Each entry has a name: the dict key, else the layer's name (Keras' input_names / output_names).
#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

struct Structure {
  enum class Form { kOne, kList, kDict };
  Form form = Form::kOne;
  std::vector<std::string> names;  // one per entry, in flat order

  std::size_t size() const { return names.size(); }
  /// One tensor (not a list of one): the form every model had before several inputs and outputs.
  bool single() const { return form == Form::kOne; }
  /// The position of `name`; ValueError naming `what` ("output") and the names there are.
  std::size_t index_of(const std::string& name, const char* what) const;
  /// "image, tab"
  std::string joined() const;
};

}  // namespace lockstep
