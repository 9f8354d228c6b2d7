// lockstep._lockstep: the C++ library bound for the Python package (python/lockstep/), which
// gives it TensorFlow's and Keras' names. Errors become Python's: ValueError, TypeError, OSError,
// lockstep.errors.DistributedError (a RuntimeError), MemoryError, KeyboardInterrupt (Ctrl-C during
// fit), RuntimeError.
#include <csignal>
#include <exception>
#include <nlohmann/json.hpp>

#include "arrays.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/training/preemption.hpp"

namespace lockstep::python {

namespace {
PyObject* distributed_error = nullptr;

// The Python exception type for a lockstep error (a replica's error: that of its cause).
PyObject* python_type(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const distribute::ReplicaError& e) {
    return e.nested() ? python_type(e.nested()) : distributed_error;
  } catch (const training::Interrupted& e) {
    return e.reason() == SIGINT ? PyExc_KeyboardInterrupt : PyExc_RuntimeError;  // Ctrl-C during fit
  } catch (const DistributedError&) {
    return distributed_error;
  } catch (const ValueError&) {
    return PyExc_ValueError;
  } catch (const TypeError&) {
    return PyExc_TypeError;  // Keras' own: a scheduled learning rate set
  } catch (const nlohmann::json::exception&) {
    return PyExc_ValueError;  // a layer's or optimizer's argument of the wrong type
  } catch (const IOError&) {
    return PyExc_OSError;
  } catch (const ResourceError&) {
    return PyExc_MemoryError;
  } catch (...) {
    return PyExc_RuntimeError;
  }
}

// Where `p` carries an exception a user's Python function raised (a replica function's, a map
// function's, however lockstep wrapped it), raises that exception again, as it was.
bool restore_python_error(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (nb::python_error& e) {
    e.restore();
    return true;
  } catch (const distribute::ReplicaError& e) {
    return e.nested() && restore_python_error(e.nested());
  } catch (const std::nested_exception& e) {
    return e.nested_ptr() && restore_python_error(e.nested_ptr());
  } catch (...) {
    return false;
  }
}
}  // namespace

void bind_errors(nb::module_& m) {
  distributed_error = PyErr_NewExceptionWithDoc(
      "lockstep.errors.DistributedError", "A peer or replica that failed, or a collective that timed out.",
      PyExc_RuntimeError, nullptr);
  m.attr("DistributedError") = nb::handle(distributed_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    if (restore_python_error(p)) return;
    try {
      std::rethrow_exception(p);
    } catch (const lockstep::Error& e) {
      PyErr_SetString(python_type(p), e.what());
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace lockstep::python

NB_MODULE(_lockstep, m) {
  using namespace lockstep::python;
  m.doc() = "lockstep's C++ library, bound for the Python package lockstep";
  // A Python function given to Dataset.map is held by the C++ pipeline, where the garbage
  // collector cannot see it: a module-level function refers to the module's globals, which hold
  // the dataset, a cycle freed only when the interpreter exits, after nanobind's leak check,
  // which would report it.
  nb::set_leak_warnings(false);
  bind_errors(m);
  bind_data(m);
  bind_model(m);
  bind_strategy(m);
  bind_tensor(m);
  bind_loop(m);
  bind_functional(m);
  bind_checkpoint(m);
}
