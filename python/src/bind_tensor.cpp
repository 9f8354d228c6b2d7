// tf.Tensor, tf.Variable and tf.GradientTape on lockstep's Tensor, Variable and GradientTape, and
// the tf.* / tf.nn.* ops a custom loop uses. Every op releases the GIL while it computes: replica
// functions run Python on several threads (strategy.run), which take turns holding it.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::python {

namespace {
DType dtype_from_name(const std::string& name) {
  for (DType d : kAllDTypes)
    if (name == dtype_name(d)) return d;
  throw ValueError("lockstep does not support the dtype " + name + " (float32, float16, bfloat16, int32, int64, uint8)");
}

nb::tuple shape_tuple(const Shape& shape) {
  nb::list dims;
  for (auto d : shape.dims()) dims.append(d);
  return nb::tuple(dims);
}

// TensorFlow's repr: tf.Tensor(<NumPy's str of the values>, shape=(...), dtype=float32).
std::string tensor_repr(const Tensor& t) {
  const nb::object values = nb::str(nb::cast(array_from_tensor(t)));
  const nb::object shape = nb::str(shape_tuple(t.shape()));
  return "tf.Tensor(" + nb::cast<std::string>(values) + ", shape=" + nb::cast<std::string>(shape) +
         ", dtype=" + dtype_name(t.dtype()) + ")";
}

const Tensor& value_of(const Tensor& t) { return t; }
const Tensor& value_of(const Variable& v) { return v.value(); }

// An op on two operands, the second converted like the first (x + 1.0, 1.0 + x, x / n); `self` a
// Tensor or a Variable (its value).
template <typename Self = Tensor, typename F>
auto binary(F f, bool reflected = false) {
  return [f, reflected](const Self& self, nb::handle other) {
    const Tensor& a = value_of(self);
    const Tensor o = as_tensor(other, "a tensor operand", &a);
    nb::gil_scoped_release release;
    return reflected ? f(o, a) : f(a, o);
  };
}

// Python's arithmetic operators, on tensors and variables alike (as TensorFlow's).
template <typename Self>
void def_arithmetic(nb::class_<Self>& c) {
  const auto add_ = [](const Tensor& a, const Tensor& b) { return add(a, b); };
  const auto sub_ = [](const Tensor& a, const Tensor& b) { return sub(a, b); };
  const auto mul_ = [](const Tensor& a, const Tensor& b) { return mul(a, b); };
  const auto div_ = [](const Tensor& a, const Tensor& b) { return div(a, b); };
  c.def("__add__", binary<Self>(add_))
      .def("__radd__", binary<Self>(add_, true))
      .def("__sub__", binary<Self>(sub_))
      .def("__rsub__", binary<Self>(sub_, true))
      .def("__mul__", binary<Self>(mul_))
      .def("__rmul__", binary<Self>(mul_, true))
      .def("__truediv__", binary<Self>(div_))
      .def("__rtruediv__", binary<Self>(div_, true))
      .def("__matmul__", binary<Self>([](const Tensor& a, const Tensor& b) { return matmul(a, b); }))
      .def("__lt__", binary<Self>([](const Tensor& a, const Tensor& b) { return less(a, b); }))
      .def("__le__", binary<Self>([](const Tensor& a, const Tensor& b) { return less_equal(a, b); }))
      .def("__gt__", binary<Self>([](const Tensor& a, const Tensor& b) { return greater(a, b); }))
      .def("__ge__", binary<Self>([](const Tensor& a, const Tensor& b) { return greater_equal(a, b); }))
      .def("__neg__", [](const Self& a) { nb::gil_scoped_release r; return neg(value_of(a)); })
      .def("__pow__", [](const Self& a, float p) { nb::gil_scoped_release r; return pow_scalar(value_of(a), p); });
  // == and != elementwise, as TensorFlow 2's (Python's default compared identities: `t == 1` was
  // False whatever t held); against None they are False and True, as there. A tensor is then
  // unhashable, as TensorFlow's.
  const auto compare = [](auto f, bool none_result) {
    return [f, none_result](const Self& self, nb::handle other) -> nb::object {
      if (other.is_none()) return nb::bool_(none_result);
      return nb::cast(binary<Self>(f)(self, other));
    };
  };
  c.def("__eq__", compare([](const Tensor& a, const Tensor& b) { return equal(a, b); }, false), nb::arg().none())
      .def("__ne__", compare([](const Tensor& a, const Tensor& b) { return not_equal(a, b); }, true),
           nb::arg().none());
  c.attr("__hash__") = nb::none();
}

template <typename F>
auto unary(F f) {
  return [f](nb::handle x) {
    const Tensor t = as_tensor(x, "a tensor op");
    nb::gil_scoped_release release;
    return f(t);
  };
}

double scalar_value(const Tensor& t) {
  LOCKSTEP_CHECK(t.numel() == 1, "only a tensor of one element converts to a Python number, not one of shape ",
                 t.shape().str());
  return t.item();
}

// TensorFlow's t[i] and t[start:stop:step] on the leading axis (recorded: a gather of rows, whose
// gradient flows back to t); any other index is a ValueError naming it, an integer out of range
// an IndexError (which also ends Python's iteration over the rows).
Tensor leading_axis_item(const Tensor& t, nb::handle index) {
  LOCKSTEP_CHECK(t.rank() > 0, "a scalar tensor cannot be indexed");
  const std::int64_t n = t.dim(0);
  std::vector<std::int64_t> rows;
  if (PySlice_Check(index.ptr())) {
    Py_ssize_t start = 0, stop = 0, step = 0;
    if (PySlice_Unpack(index.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
    PySlice_AdjustIndices(static_cast<Py_ssize_t>(n), &start, &stop, step);
    for (Py_ssize_t i = start; step > 0 ? i < stop : i > stop; i += step) rows.push_back(i);
  } else if (PyIndex_Check(index.ptr()) && !PyBool_Check(index.ptr())) {
    PyObject* as_index = PyNumber_Index(index.ptr());
    if (as_index == nullptr) throw nb::python_error();
    std::int64_t i = nb::cast<std::int64_t>(nb::steal(as_index));
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      throw nb::index_error(("index " + nb::cast<std::string>(nb::repr(index)) +
                             " is out of range for a tensor of shape " + t.shape().str()).c_str());
    rows.push_back(i);
  } else {
    throw ValueError("lockstep's tf.Tensor supports only an integer or a slice on the leading axis as an index, "
                     "not " + nb::cast<std::string>(nb::repr(index)));
  }
  const bool is_slice = PySlice_Check(index.ptr());
  const auto count = static_cast<std::int64_t>(rows.size());
  nb::gil_scoped_release release;
  if (count == 0) {
    Shape empty = t.shape();
    empty.dims()[0] = 0;
    return Tensor::zeros(empty, t.dtype()).to(t.device());
  }
  const Tensor out = gather_rows(t, Tensor::from_vector(rows, Shape({count})).to(t.device()));
  return is_slice ? out : reshape(out, t.shape().tail());
}

// tf.GradientTape: made on the thread that enters it (a tape records the ops of its own thread,
// which inside strategy.run is the replica's); leaving the `with` stops the recording, and
// gradient() may still be called after it, as in TensorFlow.
class PyTape {
 public:
  explicit PyTape(bool persistent) : persistent_(persistent) {}
  void enter() {
    LOCKSTEP_CHECK(!tape_, "tf.GradientTape: this tape was entered already");
    tape_ = std::make_unique<GradientTape>(persistent_);
  }
  void exit() {
    if (tape_) tape_->stop_recording();
  }
  void watch(nb::handle x) {
    GradientTape& t = tape("watch");
    if (nb::isinstance<Variable>(x)) {
      t.watch(nb::cast<const Variable&>(x));
    } else {
      t.watch(as_tensor(x, "tf.GradientTape.watch"));
    }
  }
  nb::list gradient(const Tensor& target, nb::handle sources, nb::handle output_gradients) {
    GradientTape& t = tape("gradient");
    std::vector<Tensor> values;
    for (nb::handle s : sources) {
      values.push_back(nb::isinstance<Variable>(s) ? nb::cast<const Variable&>(s).value()
                                                   : as_tensor(s, "tf.GradientTape.gradient sources"));
    }
    const Tensor seed = output_gradients.is_none() ? Tensor() : as_tensor(output_gradients, "output_gradients", &target);
    std::vector<Tensor> grads;
    {
      nb::gil_scoped_release release;
      grads = t.gradient(target, values, seed);
    }
    return tensors_or_none(grads);
  }

 private:
  GradientTape& tape(const char* what) {
    LOCKSTEP_CHECK(tape_ != nullptr, "tf.GradientTape.", what, ": the tape records only inside `with tf.GradientTape() as tape:`");
    return *tape_;
  }
  bool persistent_;
  std::unique_ptr<GradientTape> tape_;
};

void bind_tensor_class(nb::module_& m) {
  // dynamic_attr: a model's output carries its Keras mask as an attribute (_keras_mask), as Keras'.
  auto tensor = nb::class_<Tensor>(m, "Tensor", nb::dynamic_attr());
  tensor.def_prop_ro("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_prop_ro("ndim", [](const Tensor& t) { return t.rank(); })
      .def_prop_ro("device", [](const Tensor& t) { return t.device().str(); })
      .def("numpy", [](const Tensor& t) { return array_from_tensor(t); })
      .def("__array__", [](const Tensor& t, nb::handle dtype, nb::handle) {
        nb::object a = nb::cast(array_from_tensor(t));
        return dtype.is_none() ? a : a.attr("astype")(dtype);
      }, nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__float__", &scalar_value)
      .def("__int__", [](const Tensor& t) { return static_cast<std::int64_t>(scalar_value(t)); })
      .def("__bool__", [](const Tensor& t) { return scalar_value(t) != 0; })
      .def("__len__", [](const Tensor& t) {
        LOCKSTEP_CHECK(t.rank() > 0, "len() of a scalar tensor");
        return t.dim(0);
      })
      .def("__getitem__", &leading_axis_item)
      .def("__repr__", &tensor_repr)
      .def("__format__", [](const Tensor& t, nb::handle spec) {
        nb::object a = nb::cast(array_from_tensor(t));
        if (t.rank() == 0) a = a.attr("item")();
        return a.attr("__format__")(spec);
      });
  def_arithmetic(tensor);
}

void bind_variable_and_tape(nb::module_& m) {
  auto variable = nb::class_<Variable>(m, "Variable");
  variable.def("__init__", [](Variable* v, nb::handle initial_value, bool trainable, const std::string& name) {
        new (v) Variable(as_tensor(initial_value, "tf.Variable").clone(), name, trainable);
      }, nb::arg("initial_value"), nb::arg("trainable") = true, nb::arg("name") = "")
      .def_prop_ro("name", &Variable::name)
      .def_prop_ro("trainable", &Variable::trainable)
      .def_prop_ro("shape", [](const Variable& v) { return shape_tuple(v.shape()); })
      .def_prop_ro("dtype", [](const Variable& v) { return std::string(dtype_name(v.value().dtype())); })
      .def("value", &Variable::value)
      .def("read_value", &Variable::read_value)
      .def("numpy", [](const Variable& v) { return array_from_tensor(v.read_value()); })
      .def("__getitem__", [](const Variable& v, nb::handle index) { return leading_axis_item(v.value(), index); })
      .def("assign", [](const Variable& v, nb::handle x) { v.assign(as_tensor(x, "tf.Variable.assign", &v.value())); })
      .def("assign_add", [](const Variable& v, nb::handle x) { v.assign_add(as_tensor(x, "assign_add", &v.value())); })
      .def("assign_sub", [](const Variable& v, nb::handle x) { v.assign_sub(as_tensor(x, "assign_sub", &v.value())); })
      .def("__repr__", [](const Variable& v) {
        return "<tf.Variable '" + v.name() + "' shape=" + v.shape().str() + " dtype=" + dtype_name(v.value().dtype()) + ">";
      });
  def_arithmetic(variable);

  nb::class_<PyTape>(m, "GradientTape")
      .def(nb::init<bool>(), nb::arg("persistent") = false)
      .def("enter", &PyTape::enter)
      .def("exit", &PyTape::exit)
      .def("watch", &PyTape::watch)
      .def("gradient", &PyTape::gradient, nb::arg("target"), nb::arg("sources"),
           nb::arg("output_gradients") = nb::none());
}

void bind_ops(nb::module_& m) {
  m.def("convert_to_tensor", [](nb::handle x, std::optional<std::string> dtype) {
    Tensor t = as_tensor(x, "tf.convert_to_tensor");
    return dtype ? t.to(dtype_from_name(*dtype)) : t;
  }, nb::arg("value"), nb::arg("dtype") = nb::none());
  m.def("cast", [](nb::handle x, const std::string& dtype) {
    const Tensor t = as_tensor(x, "tf.cast");
    const DType d = dtype_from_name(dtype);
    nb::gil_scoped_release release;
    return cast(t, d);
  });
  m.def("reduce_sum", [](nb::handle x, std::optional<int> axis, bool keepdims) {
    const Tensor t = as_tensor(x, "tf.reduce_sum");
    nb::gil_scoped_release release;
    return sum(t, axis, keepdims);
  }, nb::arg("x"), nb::arg("axis") = nb::none(), nb::arg("keepdims") = false);
  m.def("reduce_mean", [](nb::handle x, std::optional<int> axis, bool keepdims) {
    const Tensor t = as_tensor(x, "tf.reduce_mean");
    nb::gil_scoped_release release;
    return mean(t, axis, keepdims);
  }, nb::arg("x"), nb::arg("axis") = nb::none(), nb::arg("keepdims") = false);
  m.def("reduce_max", [](nb::handle x, int axis, bool keepdims) {
    const Tensor t = as_tensor(x, "tf.reduce_max");
    nb::gil_scoped_release release;
    return reduce_max(t, axis, keepdims);
  }, nb::arg("x"), nb::arg("axis"), nb::arg("keepdims") = false);
  m.def("argmax", [](nb::handle x, int axis) {
    const Tensor t = as_tensor(x, "tf.argmax");
    nb::gil_scoped_release release;
    return argmax(t, axis);
  }, nb::arg("x"), nb::arg("axis") = -1);
  m.def("reshape", [](nb::handle x, const std::vector<std::int64_t>& shape) {
    const Tensor t = as_tensor(x, "tf.reshape");
    nb::gil_scoped_release release;
    return reshape(t, Shape(shape));
  });
  m.def("softmax", [](nb::handle x, int axis) {
    const Tensor t = as_tensor(x, "tf.nn.softmax");
    nb::gil_scoped_release release;
    return softmax(t, axis);
  }, nb::arg("x"), nb::arg("axis") = -1);
  m.def("log_softmax", [](nb::handle x, int axis) {
    const Tensor t = as_tensor(x, "tf.nn.log_softmax");
    nb::gil_scoped_release release;
    return log_softmax(t, axis);
  }, nb::arg("x"), nb::arg("axis") = -1);
  // tf.<name>(a, b): a converted to a tensor, b like a (a Python number takes a's dtype).
  const auto def_binary = [&m](const char* name, const char* what, Tensor (*f)(const Tensor&, const Tensor&)) {
    m.def(name, [f, what](nb::handle a, nb::handle b) { return binary(f)(as_tensor(a, what), b); });
  };
  def_binary("add", "tf.add", [](const Tensor& x, const Tensor& y) { return add(x, y); });
  def_binary("maximum", "tf.maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); });
  def_binary("minimum", "tf.minimum", [](const Tensor& x, const Tensor& y) { return minimum(x, y); });
  def_binary("matmul", "tf.matmul", [](const Tensor& x, const Tensor& y) { return matmul(x, y); });
  // Comparisons: uint8 0 / 1 (lockstep has no bool dtype), which tf.cast turns into numbers.
  def_binary("equal", "tf.math.equal", &equal);
  def_binary("not_equal", "tf.math.not_equal", &not_equal);
  def_binary("less", "tf.math.less", &less);
  def_binary("less_equal", "tf.math.less_equal", &less_equal);
  def_binary("greater", "tf.math.greater", &greater);
  def_binary("greater_equal", "tf.math.greater_equal", &greater_equal);
  // tf.where(condition, x, y): a Python number on one side takes the other side's dtype.
  m.def("where", [](nb::handle condition, nb::handle x, nb::handle y) {
    const bool x_number = PyFloat_Check(x.ptr()) || PyLong_Check(x.ptr());
    Tensor xt, yt;
    if (x_number) {
      yt = as_tensor(y, "tf.where y");
      xt = as_tensor(x, "tf.where x", &yt);
    } else {
      xt = as_tensor(x, "tf.where x");
      yt = as_tensor(y, "tf.where y", &xt);
    }
    const Tensor c = as_tensor(condition, "tf.where condition");
    nb::gil_scoped_release release;
    return where(c, xt, yt);
  }, nb::arg("condition"), nb::arg("x"), nb::arg("y"));
  m.def("sparse_softmax_cross_entropy_with_logits", [](nb::handle labels, nb::handle logits) {
    const Tensor l = as_tensor(labels, "tf.nn.sparse_softmax_cross_entropy_with_logits labels");
    const Tensor z = as_tensor(logits, "tf.nn.sparse_softmax_cross_entropy_with_logits logits");
    nb::gil_scoped_release release;
    return sparse_softmax_cross_entropy_with_logits(l, z);
  }, nb::arg("labels"), nb::arg("logits"));
  m.def("relu", unary([](const Tensor& t) { return relu(t); }));
  m.def("sigmoid", unary([](const Tensor& t) { return sigmoid(t); }));
  m.def("tanh", unary([](const Tensor& t) { return tanh(t); }));
  m.def("exp", unary([](const Tensor& t) { return exp(t); }));
  m.def("log", unary([](const Tensor& t) { return log(t); }));
  m.def("sqrt", unary([](const Tensor& t) { return sqrt(t); }));
  m.def("square", unary([](const Tensor& t) { return square(t); }));
  m.def("abs", unary([](const Tensor& t) { return abs(t); }));
  m.def("stop_gradient", unary([](const Tensor& t) { return stop_gradient(t); }));
}
}  // namespace

Tensor as_tensor(nb::handle value, const char* what, const Tensor* like) {
  if (nb::isinstance<Tensor>(value)) return nb::cast<Tensor>(value);
  if (nb::isinstance<Variable>(value)) return nb::cast<const Variable&>(value).value();
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())) {
    const bool real = PyFloat_Check(value.ptr());
    const DType d = like && (is_floating(like->dtype()) || !real) ? like->dtype() : real ? DType::kF32 : DType::kI32;
    return Tensor::scalar(nb::cast<double>(value), d);
  }
  const nb::object array = nb::module_::import_("lockstep._support").attr("host_array")(value, what);
  return tensor_from_array(nb::cast<HostArray>(array), what);
}

nb::list tensors_or_none(const std::vector<Tensor>& tensors) {
  nb::list out;
  for (const auto& t : tensors) out.append(t.defined() ? nb::cast(t) : nb::none());
  return out;
}

std::vector<Tensor> tensors_from_list(nb::handle values, const char* what) {
  std::vector<Tensor> out;
  for (nb::handle v : values) out.push_back(v.is_none() ? Tensor() : as_tensor(v, what));
  return out;
}

void bind_tensor(nb::module_& m) {
  bind_tensor_class(m);
  bind_variable_and_tape(m);
  bind_ops(m);
}

}  // namespace lockstep::python
