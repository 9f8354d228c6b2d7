// lockstep._lockstep: the C++ library bound for the Python package (python/lockstep/), which
// gives it TensorFlow's and Keras' names. Errors become Python's: ValueError, OSError,
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
}  // namespace

void bind_errors(nb::module_& m) {
  distributed_error = PyErr_NewExceptionWithDoc(
      "lockstep.errors.DistributedError", "A peer or replica that failed, or a collective that timed out.",
      PyExc_RuntimeError, nullptr);
  m.attr("DistributedError") = nb::handle(distributed_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
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
  bind_errors(m);
  bind_data(m);
  bind_model(m);
  bind_strategy(m);
  bind_tensor(m);
  bind_loop(m);
}
