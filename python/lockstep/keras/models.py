"""keras.Model / keras.Sequential on lockstep's C++ models: compile, fit, evaluate, predict, save."""
import contextlib
import numbers

import numpy as np

from .. import _lockstep, distribute
from .._support import host_array, refuse_arguments, training_argument
from ..data import Dataset
from . import callbacks as callbacks_module
from . import losses, optimizers
from . import metrics as metrics_module
from .layers import (Input, KerasTensor, Layer, assign_weights, flat_keras_tensors, gathered_weights,
                     snake_case, sublayers_of, trace_call)


class History:
    """keras.callbacks.History: .history maps each log name to its per-epoch values."""

    def __init__(self, epoch, history, params, model):
        self.epoch = list(epoch)
        self.history = {k: list(v) for k, v in history.items()}
        self.params = params
        self.model = model


def _verbose(verbose):
    return -1 if verbose == "auto" else int(verbose)


def _batch_size(batch_size):
    """Keras' default of 32 for None only: a batch_size of 0 reaches the C++ check, named."""
    return 32 if batch_size is None else int(batch_size)


def _class_weight(class_weight):
    """Keras' class_weight: a dict of class index to weight (the C++ checks the rest)."""
    if not isinstance(class_weight, dict):
        raise ValueError(f"keras.Model.fit: class_weight must be a dict mapping class indices to weights, got "
                         f"{type(class_weight).__name__}")
    return {int(c): float(w) for c, w in class_weight.items()}


def _steps(steps):
    return -1 if steps is None else int(steps)


def _callbacks(callbacks, model):
    return [callbacks_module.native(c, model) for c in (callbacks or [])]


def _metric_list(metrics, what="metrics"):
    given = []
    for m in metrics or []:
        if not isinstance(m, (str, metrics_module.Metric)):
            raise ValueError(f"keras.Model.compile: lockstep takes {what} by name or as keras.metrics "
                             f"objects, not {m!r}")
        given.append(m if isinstance(m, str) else m._metric)
    return given


def _per_output(value, outputs, what):
    """Keras' per-output argument of compile (loss, loss_weights, metrics): a dict by output name,
    a list in the outputs' order (metrics: a list of lists), or one loss for every output (under "")."""
    if isinstance(value, dict):
        return dict(value)
    listed = isinstance(value, (list, tuple))
    if what in ("metrics", "weighted_metrics"):
        if not value:
            return {}
        listed = listed and all(v is None or isinstance(v, (list, tuple)) for v in value)
        if not listed:
            raise ValueError(f"keras.Model.compile: give {what} per output of a model of several outputs, as a dict "
                             f"({{'{outputs[0]}': [...]}}) or a list of lists, not {value!r}")
    if listed:
        if len(value) != len(outputs):
            raise ValueError(f"keras.Model.compile: {what} has {len(value)} entries for the model's "
                             f"{len(outputs)} outputs ({', '.join(outputs)})")
        return dict(zip(outputs, value))
    if what == "loss_weights":
        raise ValueError(f"keras.Model.compile: loss_weights must be a dict or a list, not {value!r}")
    return {"": value}


class Model:
    """A lockstep model. Made inside a strategy's scope(), it trains on that strategy's replicas.

    A subclass (Keras' `class M(keras.Model)` whose __init__ sets layers and whose call(inputs) calls
    them) is built by tracing call on keras.Input of the data's shape, at the first fit, evaluate,
    predict, model(x) or build(input_shape): from then on it is the functional model of the layers
    call called (compile may come before). Python control flow that depends on the data's values
    cannot be traced, and is refused where the call reads a tensor's value."""

    def __init__(self, *args, **kwargs):
        self._strategy = distribute.current_strategy()  # the C++ model refers to it: keep it alive
        if not args and "inputs" not in kwargs and "outputs" not in kwargs and _subclass_with_call(self):
            self._init_subclass(**kwargs)
            return
        model = args[0] if len(args) == 1 and not kwargs else None
        if not isinstance(model, _lockstep.Model):
            model = _functional(*args, **kwargs)
        self._model = model

    def _init_subclass(self, name=None, trainable=True, **kwargs):
        self._subclass_trainable = bool(trainable)  # the traced model's, once traced (_trace)
        refuse_arguments(f"{type(self).__name__}.__init__ (a keras.Model subclass)", **kwargs)
        self._subclass_name = name or snake_case(type(self).__name__)
        self._pending_compile = None

    @property
    def _unbuilt_subclass(self):
        return "_model" not in vars(self) and "_subclass_name" in vars(self)

    def _trace(self, inputs):
        """A subclass's functional model: call traced on `inputs` (keras.Input's, nested as the data),
        inside the strategy scope the model was made in, then the compile given before, if any."""
        scope = self._strategy.scope() if self._strategy is not None and distribute.current_strategy() is not \
            self._strategy else contextlib.nullcontext()
        with scope:
            outputs = trace_call(self, [inputs], {})
            self._model = _functional(inputs, outputs, self._subclass_name)
            if not self._subclass_trainable:
                self._model.trainable = False
            if self._pending_compile is not None:
                self.compile(**self._pending_compile)

    def _build_for(self, x, what):
        """A subclass not yet built: traced on keras.Input of x's shape per example (x an array, a list
        or dict of arrays, or a tf.data.Dataset whose first element tells)."""
        if not self._unbuilt_subclass:
            return
        if isinstance(x, Dataset):
            element = next(iter(x.take(1)), None)
            if element is None:
                raise ValueError(f"{what}: the dataset is empty, so subclassed model '{self.name}' cannot be built "
                                 f"from it; call model.build(input_shape) first")
            x = element[0] if isinstance(element, tuple) else element
        self._trace(_inputs_like(x, what))

    def build(self, input_shape):
        if self._unbuilt_subclass:
            self._trace(_inputs_for_shape(input_shape))
            return
        self._model.build([-1 if d is None else int(d) for d in input_shape])

    @property
    def stop_training(self):
        return self._model.stop_training

    @stop_training.setter
    def stop_training(self, value):
        self._model.stop_training = bool(value)

    @property
    def name(self):
        return self._subclass_name if self._unbuilt_subclass else self._model.name

    @property
    def trainable(self):
        return self._subclass_trainable if self._unbuilt_subclass else self._model.trainable

    @trainable.setter
    def trainable(self, value):
        """Keras' model.trainable = False: every layer under the model frozen (Keras' setter is
        recursive), a nested model's too; fit takes it at the next compile (Keras' rule: compile
        again after changing it, or fit raises ValueError saying so)."""
        if self._unbuilt_subclass:
            self._subclass_trainable = bool(value)
            for sub in sublayers_of(self):
                sub.trainable = value
        else:
            self._model.trainable = bool(value)

    @property
    def layers(self):
        return [Layer(layer) for layer in self._model.layers]

    def get_layer(self, name=None, index=None):
        """Keras' model.get_layer(name) or (index=i): a layer of model.layers."""
        found = self.layers
        if (name is None) == (index is None):
            raise ValueError("keras.Model.get_layer: give a name or an index (one of them)")
        if index is not None:
            if not -len(found) <= int(index) < len(found):
                raise ValueError(f"keras.Model.get_layer: index {index} is outside the {len(found)} layers of "
                                 f"model '{self.name}'")
            return found[int(index)]
        for layer in found:
            if layer.name == name:
                return layer
        raise ValueError(f"keras.Model.get_layer: model '{self.name}' has no layer '{name}' (it has "
                         f"{', '.join(layer.name for layer in found)}; a model called inside this one, or "
                         f"loaded from a .keras file where it was, is held as its layers: get them by their names)")

    @property
    def metrics_names(self):
        return self._model.metrics_names

    @property
    def input_shape(self):
        return tuple(None if d < 0 else d for d in self._model.input_shape)

    @property
    def output_shape(self):
        return tuple(None if d < 0 else d for d in self._model.output_shape)

    @property
    def optimizer(self):
        """The keras.optimizers object compile was given (one of the C++ optimizer for a loaded model)."""
        native = self._model.optimizer
        if native is None:
            return None
        known = getattr(self, "_optimizer", None)
        if known is None or known._optimizer is not native:
            known = self._optimizer = optimizers.Optimizer._of(native)
        return known

    def summary(self, print_fn=None):
        (print_fn or print)(self._model.summary())

    def count_params(self):
        return self._model.count_params()

    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True):
        refuse_arguments("keras.Model.compile", run_eagerly=run_eagerly)
        if self._unbuilt_subclass:  # compiled once call is traced (the outputs tell the losses' form)
            self._pending_compile = dict(optimizer=optimizer, loss=loss, loss_weights=loss_weights, metrics=metrics,
                                         weighted_metrics=weighted_metrics, steps_per_execution=steps_per_execution,
                                         jit_compile=jit_compile, auto_scale_loss=auto_scale_loss)
            return
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, numbers.Integral):
            raise ValueError(f"keras.Model.compile: steps_per_execution must be a positive integer, got "
                             f"{steps_per_execution!r}")
        if loss is None:
            raise ValueError("keras.Model.compile: lockstep needs a loss")
        outputs = self._model.output_structure[1]
        if len(outputs) == 1:  # one tensor, or a list or dict of one: Keras takes either form of each
            loss = _per_output(loss, outputs, "loss").get(outputs[0], loss) if isinstance(loss, (dict, list, tuple)) \
                else loss
            if isinstance(metrics, dict) or (metrics and all(isinstance(m, (list, tuple)) for m in metrics)):
                metrics = _per_output(metrics, outputs, "metrics").get(outputs[0])
            if isinstance(weighted_metrics, dict) or (weighted_metrics and all(isinstance(m, (list, tuple))
                                                                               for m in weighted_metrics)):
                weighted_metrics = _per_output(weighted_metrics, outputs, "weighted_metrics").get(outputs[0])
            if isinstance(loss, (dict, list, tuple)):
                raise ValueError(f"keras.Model.compile: the model has one output, '{outputs[0]}'; give it one loss, "
                                 f"not {loss!r}")
            refuse_arguments("keras.Model.compile of a model of one output", loss_weights=loss_weights)
            self._model.compile(optimizers.get(optimizer), losses.get(loss), _metric_list(metrics))
            if weighted_metrics:
                self._model.add_weighted_metrics(_metric_list(weighted_metrics, "weighted_metrics"))
        else:
            per_output_metrics = {k: _metric_list([v] if isinstance(v, (str, metrics_module.Metric)) else v)
                                  for k, v in _per_output(metrics or {}, outputs, "metrics").items()}
            weighted = _per_output(weighted_metrics or {}, outputs, "weighted_metrics")
            unknown = [str(k) for k in weighted if k not in outputs]
            if unknown:
                raise ValueError(f"keras.Model.compile: weighted_metrics names {', '.join(unknown)}, which is no "
                                 f"output of the model ({', '.join(outputs)})")
            self._model.compile_outputs(optimizers.get(optimizer),
                                        {k: losses.get(v) for k, v in _per_output(loss, outputs, "loss").items()},
                                        per_output_metrics,
                                        {k: float(v) for k, v in _per_output(loss_weights or {}, outputs,
                                                                             "loss_weights").items()})
            for output in outputs:  # in the outputs' order, as Keras logs them
                if weighted.get(output):
                    listed = weighted[output]
                    listed = [listed] if isinstance(listed, (str, metrics_module.Metric)) else listed
                    self._model.add_weighted_metrics(_metric_list(listed, "weighted_metrics"), output)
        self._optimizer = optimizer if isinstance(optimizer, optimizers.Optimizer) else None
        # Keras' "auto", True or False; the C++ model names them auto, on and off.
        self._model.jit_compile = ("on" if jit_compile else "off") if isinstance(jit_compile, bool) else jit_compile
        self._model.steps_per_execution = int(steps_per_execution)

    @property
    def steps_per_execution(self):
        return self._model.steps_per_execution

    def _several(self):
        """Whether the model has several inputs or outputs: x and y are then lists or dicts of arrays."""
        return len(self._model.input_structure[1]) > 1 or len(self._model.output_structure[1]) > 1

    def _flat_arrays(self, value, structure, what):
        """x or y of a model of several inputs or outputs: one array per entry, in the structure's
        flat order (a dict by the entries' names, a list by position, one array for one entry)."""
        names = structure[1]
        if isinstance(value, dict):
            missing = [n for n in names if n not in value]
            if missing or len(value) != len(names):
                unknown = [str(k) for k in value if k not in names]
                raise ValueError(f"{what}: the model's entries are {', '.join(names)}; "
                                 + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"))
            flat = [value[n] for n in names]
        elif isinstance(value, (list, tuple)) and len(names) > 1:
            if len(value) != len(names):
                raise ValueError(f"{what}: expected {len(names)} arrays ({', '.join(names)}), got {len(value)}")
            flat = list(value)
        else:
            flat = [value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value]
        return [host_array(a, what) for a in flat]

    def _one_array(self, value, what):
        """x or y of a model of one input and one output (a list or dict of one array is taken too)."""
        if isinstance(value, dict) and len(value) == 1:
            value = next(iter(value.values()))
        elif isinstance(value, (list, tuple)) and len(value) == 1 and hasattr(value[0], "shape"):
            value = value[0]  # [x]: a list of one array (a list of one list of numbers is one example)
        return host_array(value, what)

    def _check_nesting(self, spec, structure, what):
        """A dataset element's inputs or targets, nested (a dict, a tuple), against the model's: its
        flat order (a dict's sorted keys) must be the model's, else the components would silently
        reach the wrong inputs or outputs."""
        if spec is None or spec == "single":
            return
        if any(child is not None for child in spec[-1]):
            raise ValueError(f"{what}: lockstep does not support dataset elements nested more than (inputs, targets) "
                             f"of tuples or dicts of tensors yet")
        names = structure[1]
        if spec[0] == "dict" and spec[1] != names:
            if sorted(spec[1]) != sorted(names):
                raise ValueError(f"{what}: the dataset's dict has {', '.join(spec[1])}; the model's entries are "
                                 f"{', '.join(names)}")
            raise ValueError(f"{what}: the dataset's dict is flat in its keys' order ({', '.join(spec[1])}), the "
                             f"model takes {', '.join(names)}: give them as a tuple in the model's order")

    def _check_dataset(self, ds, what, targets=True):
        """Where a dataset's elements are nested ((inputs, targets) of dicts or tuples), that each part
        is flat in the order the model takes its inputs and outputs (a map's elements: at its first)."""
        ds.when_structure_known(lambda structure: self._check_structure(structure, what, targets))

    def _check_structure(self, structure, what, targets):
        if structure in ("single", "tuple"):
            return  # flat: the C++ side checks counts and shapes
        if not targets:  # predict: the inputs, or (inputs, targets) as fit's
            nested_pair = structure[0] == "tuple" and any(child is not None for child in structure[1])
            self._check_nesting(structure[1][0] if nested_pair else structure, self._model.input_structure, what)
            return
        if structure[0] != "tuple" or len(structure[1]) not in (2, 3):
            raise ValueError(f"{what}: a dataset of nested elements must yield (inputs, targets) or (inputs, "
                             f"targets, sample_weight)")
        if len(structure[1]) == 3 and structure[1][2] not in (None, "single"):  # one array per output
            self._check_nesting(structure[1][2], self._model.output_structure, what + " sample_weight")
        self._check_nesting(structure[1][0], self._model.input_structure, what + " inputs")
        self._check_nesting(structure[1][1], self._model.output_structure, what + " targets")

    def _dataset(self, x, y, batch_size, what, sample_weight=None):
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError(f"{what}: y must not be given when x is a tf.data.Dataset (it yields (x, y))")
            self._check_dataset(x, what)
            return x._ds
        if y is None:
            raise ValueError(f"{what}: y is missing (lockstep trains on (x, y) arrays or a tf.data.Dataset)")
        if self._several():
            arrays = (self._flat_arrays(x, self._model.input_structure, what + " x")
                      + self._flat_arrays(y, self._model.output_structure, what + " y"))
        else:
            arrays = [self._one_array(x, what + " x"), self._one_array(y, what + " y")]
        if sample_weight is not None:  # after the targets, as the C++ reads them (Keras' (x, y, sample_weight))
            weights = self._sample_weight(sample_weight, what)
            arrays.extend(weights if isinstance(weights, list) else [weights])
        return Dataset.from_tensor_slices(tuple(arrays)).batch(_batch_size(batch_size))._ds

    def _sample_weight(self, value, what):
        """Keras' sample_weight: one array, float32, whose examples the C++ checks against x's; a
        model of several outputs weighs each output's loss by it. For a model of several outputs a
        list (in the outputs' order) or a dict by output name gives one array per output (a list of
        them here), each weighing its output's loss and weighted metrics."""
        outputs = self._model.output_structure
        if isinstance(value, (list, tuple, dict)) and len(outputs[1]) > 1:
            return [np.ascontiguousarray(a, dtype=np.float32)
                    for a in self._flat_arrays(value, outputs, what + " sample_weight")]
        if isinstance(value, dict) and len(value) == 1:
            value = next(iter(value.values()))
        a = host_array(value, what + " sample_weight")
        return np.ascontiguousarray(a, dtype=np.float32)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        refuse_arguments("keras.Model.fit", validation_freq=None if validation_freq == 1 else validation_freq)
        self._build_for(x, "keras.Model.fit")
        o = _lockstep.Model.FitOptions()
        o.epochs = int(epochs)
        o.steps_per_epoch = _steps(steps_per_epoch)
        o.batch_size = _batch_size(batch_size)
        o.validation_split = float(validation_split)
        o.validation_steps = _steps(validation_steps)
        o.shuffle = bool(shuffle)
        o.initial_epoch = int(initial_epoch)
        o.verbose = _verbose(verbose)
        o.callbacks = _callbacks(callbacks, self)
        if class_weight is not None:
            o.class_weight = _class_weight(class_weight)
        if sample_weight is not None:  # (the C++ refuses it beside a dataset)
            weights = self._sample_weight(sample_weight, "keras.Model.fit")
            if isinstance(weights, list):
                o.set_sample_weights(weights)
            else:
                o.set_sample_weight(weights)
        if validation_data is not None:
            if isinstance(validation_data, Dataset):
                self._check_dataset(validation_data, "keras.Model.fit validation_data")
                o.validation_data = validation_data._ds
            else:
                if not isinstance(validation_data, (list, tuple)) or len(validation_data) not in (2, 3):
                    raise ValueError("keras.Model.fit: validation_data must be a tf.data.Dataset or a tuple (x_val, "
                                     "y_val) or (x_val, y_val, val_sample_weight)")
                vx, vy = validation_data[:2]
                vw = validation_data[2] if len(validation_data) == 3 else None
                o.validation_data = self._dataset(vx, vy, validation_batch_size or batch_size, "keras.Model.fit "
                                                  "validation_data", sample_weight=vw)
        if isinstance(x, Dataset):
            epoch, history = self._model.fit_dataset(self._dataset(x, y, batch_size, "keras.Model.fit"), o)
        else:
            if y is None:
                raise ValueError("keras.Model.fit: y is missing (lockstep trains on (x, y) arrays or a "
                                 "tf.data.Dataset)")
            if self._several():
                epoch, history = self._model.fit_arrays_list(
                    self._flat_arrays(x, self._model.input_structure, "keras.Model.fit x"),
                    self._flat_arrays(y, self._model.output_structure, "keras.Model.fit y"), o)
            else:
                epoch, history = self._model.fit_arrays(self._one_array(x, "keras.Model.fit x"),
                                                        self._one_array(y, "keras.Model.fit y"), o)
        params = {"epochs": o.epochs, "steps": None if o.steps_per_epoch < 0 else o.steps_per_epoch,
                  "verbose": o.verbose}
        self.history = History(epoch, history, params, self)
        return self.history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False):
        self._build_for(x, "keras.Model.evaluate")
        verbose = 1 if verbose == "auto" else int(verbose)
        per_output = None
        if sample_weight is not None:  # (the C++ refuses it beside a dataset)
            sample_weight = self._sample_weight(sample_weight, "keras.Model.evaluate")
            if isinstance(sample_weight, list):
                per_output, sample_weight = sample_weight, None
        if isinstance(x, Dataset):
            logs = self._model.evaluate_dataset(self._dataset(x, y, batch_size, "keras.Model.evaluate"),
                                                _steps(steps), verbose, _callbacks(callbacks, self), sample_weight,
                                                per_output)
        else:
            if y is None:
                raise ValueError("keras.Model.evaluate: y is missing")
            if self._several():
                logs = self._model.evaluate_arrays_list(
                    self._flat_arrays(x, self._model.input_structure, "keras.Model.evaluate x"),
                    self._flat_arrays(y, self._model.output_structure, "keras.Model.evaluate y"),
                    _batch_size(batch_size), _steps(steps), verbose, _callbacks(callbacks, self), sample_weight,
                    per_output)
            else:
                logs = self._model.evaluate_arrays(self._one_array(x, "keras.Model.evaluate x"),
                                                   self._one_array(y, "keras.Model.evaluate y"),
                                                   _batch_size(batch_size), _steps(steps), verbose,
                                                   _callbacks(callbacks, self), sample_weight)
        if return_dict:
            return dict(logs)
        values = [logs[name] for name in self.metrics_names if name in logs]
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """An array, or for a model of several outputs a list or dict of them, as its outputs are."""
        refuse_arguments("keras.Model.predict", callbacks=callbacks or None)
        self._build_for(x, "keras.Model.predict")
        form, names = self._model.output_structure
        if not self._several():
            if isinstance(x, Dataset):
                self._check_dataset(x, "keras.Model.predict", targets=False)
                out = self._model.predict_dataset(x._ds, _steps(steps))
            else:
                out = self._model.predict_arrays(self._one_array(x, "keras.Model.predict x"), _batch_size(batch_size),
                                                 _steps(steps))
            return {names[0]: out} if form == "dict" else out  # a list of one: the array, as before
        if isinstance(x, Dataset):
            self._check_dataset(x, "keras.Model.predict", targets=False)
            outputs = self._model.predict_dataset_outputs(x._ds, _steps(steps))
        else:
            outputs = self._model.predict_arrays_list(
                self._flat_arrays(x, self._model.input_structure, "keras.Model.predict x"), _batch_size(batch_size),
                _steps(steps))
        if form == "dict":
            return dict(zip(names, outputs))
        return outputs if form == "list" else outputs[0]

    def get_weights(self):
        """Keras' model.get_weights(): a NumPy copy of every variable, in model.weights' order."""
        return [v.numpy() for v in self.variables]

    def set_weights(self, weights):
        """Keras' model.set_weights(): every variable, in model.weights' order, from an array of its
        shape (on every replica of the model's strategy)."""
        assign_weights("keras.Model.set_weights", self.name, self.variables, weights)

    def __call__(self, inputs, training=None, mask=None):
        """Keras' model(x, training=...): one batch forward, a tf.Tensor (recorded by a GradientTape
        open on this thread; inside strategy.run on the replica's copies of the weights). On
        KerasTensors (a model called inside another being built): its layers called on them, the
        same layer objects, so their weights are shared (the outer model lists those layers, not
        this model). There training=False runs every call of the model in inference mode always
        (Keras' transfer-learning guide's base_model(x, training=False): fit too), True in training
        mode always; a call given a mode of its own inside the model keeps it."""
        refuse_arguments("keras.Model.__call__", mask=mask)
        training = training_argument("keras.Model.__call__", training)
        if flat_keras_tensors(inputs) is not None:
            if self._unbuilt_subclass:
                if training is not None:
                    raise ValueError(f"lockstep does not support the argument training={training!r} of a "
                                     f"subclassed model's call on KerasTensors yet: pass it to the layers its call "
                                     f"calls instead")
                return trace_call(self, [inputs], {})
            return self._call_symbolic(inputs, training)
        self._build_for(inputs, "keras.Model.__call__")
        if self._several():
            raise ValueError(f"lockstep does not support calling model '{self.name}' of several inputs or outputs yet; "
                             f"use predict (a list or dict of arrays)")
        return _lockstep.model_call(self._model, inputs, bool(training))

    def _call_symbolic(self, inputs, training=None):
        """The model's outputs, nested as its output structure, of its layers called on `inputs`
        (nested as its input structure: one KerasTensor, a list, or a dict by the inputs' names)."""
        form, names = self._model.input_structure
        if isinstance(inputs, dict):
            if sorted(inputs) != sorted(names):
                raise ValueError(f"model '{self.name}' takes inputs {', '.join(names)}, got {', '.join(inputs)}")
            flat = [inputs[n] for n in names]
        else:
            flat = flat_keras_tensors(inputs)
        outputs = [KerasTensor(t) for t in _lockstep.call_model(self._model, [x._tensor for x in flat], training)]
        out_form, out_names = self._model.output_structure
        if out_form == "dict":
            return dict(zip(out_names, outputs))
        return outputs if out_form == "list" else outputs[0]

    @property
    def trainable_variables(self):
        if self._unbuilt_subclass:
            return [v for v in self.variables if v.trainable]
        return _lockstep.trainable_variables(self._model)

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self):
        if self._unbuilt_subclass:
            return [v for v in self.variables if not v.trainable]
        return _lockstep.non_trainable_variables(self._model)

    non_trainable_weights = non_trainable_variables

    @property
    def variables(self):
        if self._unbuilt_subclass:  # Keras' tracked layers' (none built until a model that calls them is)
            return gathered_weights(self)
        return _lockstep.variables(self._model)

    weights = variables

    @property
    def losses(self):
        """Keras' regularization losses: lockstep's layers take no regularizers, so none."""
        return []

    def save(self, filepath, overwrite=True, **kwargs):
        """A path ending in .keras: a Keras 3 archive; another: lockstep's saved-model folder."""
        refuse_arguments("keras.Model.save", **kwargs)
        self._model.save(_not_legacy_h5(filepath, "keras.Model.save"))

    def save_weights(self, filepath, overwrite=True):
        self._model.save_weights(str(filepath))

    def load_weights(self, filepath, skip_mismatch=False):
        refuse_arguments("keras.Model.load_weights", skip_mismatch=skip_mismatch)
        self._model.load_weights(str(filepath))

    def __getattr__(self, name):
        if name == "_model" and "_subclass_name" in vars(self):
            raise ValueError(f"model '{self._subclass_name}' ({type(self).__name__}) is not built yet: lockstep "
                             f"builds a subclassed keras.Model by tracing its call at the first fit, evaluate, "
                             f"predict or model(x), or at model.build(input_shape)")
        if name in ("_model", "_strategy") and "_strategy" not in vars(self):
            raise TypeError(f"{type(self).__name__}.__init__ must call super().__init__() (keras.Model's)")
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.keras.Model.{name} yet")


def _flatten_tensors(value, what):
    """keras.Model's inputs or outputs: (form, KerasTensors, dict keys) for the C++ Functional."""
    if isinstance(value, dict):
        form, keys, flat = "dict", [str(k) for k in value], list(value.values())
    elif isinstance(value, (list, tuple)):
        form, keys, flat = "list", [], list(value)
    else:
        form, keys, flat = "one", [], [value]
    for x in flat:
        if not isinstance(x, KerasTensor):
            raise ValueError(f"keras.Model: {what} must be KerasTensors (keras.Input and layers called on it), "
                             f"not {type(x).__name__}")
    return form, [x._tensor for x in flat], keys


def _subclass_with_call(model):
    """Whether `model` is of a keras.Model subclass that defines call (Keras' subclassed model)."""
    return type(model) is not Model and callable(getattr(type(model), "call", None))


def _inputs_for_shape(input_shape):
    """keras.Input's for build(input_shape): a shape with the batch's None first, or a list or dict
    of them (a model of several inputs)."""
    if isinstance(input_shape, dict):
        return {k: _inputs_for_shape(v) for k, v in input_shape.items()}
    if isinstance(input_shape, (list, tuple)) and input_shape and isinstance(input_shape[0], (list, tuple)):
        return [_inputs_for_shape(s) for s in input_shape]
    return Input(shape=tuple(input_shape)[1:])


def _inputs_like(x, what):
    """keras.Input's of the shapes of x's examples: x an array, or a list, tuple or dict of them."""
    if isinstance(x, dict):
        return {k: _inputs_like(v, what) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x and hasattr(x[0], "shape"):
        return [_inputs_like(v, what) for v in x]
    return Input(shape=host_array(x, what + " x").shape[1:])


def _functional(inputs=None, outputs=None, name=None, trainable=True):
    """keras.Model(inputs, outputs): each a KerasTensor, a list of them or a dict of them."""
    if inputs is None and outputs is None:
        raise ValueError("keras.Model needs inputs and outputs (keras.Model(inputs, outputs)), or subclass it with "
                         "a call method")
    model = _lockstep.functional(*_flatten_tensors(inputs, "inputs"), *_flatten_tensors(outputs, "outputs"),
                                 name or "functional")
    if not trainable:
        model.trainable = False
    return model


class Sequential(Model):
    """keras.Sequential: a stack of layers. A first keras.Input, or a first layer given input_shape=,
    builds it at once (shape mismatches are reported here, not in fit)."""

    def __init__(self, layers=None, name=None, trainable=True):
        native = []
        for i, layer in enumerate(layers or []):
            if i == 0 and isinstance(layer, KerasTensor) and layer._tensor.is_input:  # keras.Input first
                native.append(layer._tensor.layer)
                continue
            if not isinstance(layer, Layer):
                raise ValueError(f"keras.Sequential: item {i} is not a lockstep layer: {layer!r}")
            _refuse_subclassed(layer, "keras.Sequential")
            if i == 0 and layer._input_shape is not None and layer._layer.class_name != "InputLayer":
                native.append(_lockstep.input_layer(list(layer._input_shape)))
            native.append(layer._layer)
        super().__init__(_lockstep.sequential(native, name or "sequential"))
        if not trainable:
            self.trainable = False

    @property
    def layers(self):
        """Keras' Sequential.layers: the layers added, without the InputLayer a keras.Input or a first
        layer's input_shape made."""
        made = self._model.layers
        return [Layer(layer) for layer in (made[1:] if made and made[0].class_name == "InputLayer" else made)]

    def add(self, layer):
        """Keras' model.add(layer); model.add(keras.Input(shape)) first, as Keras 3's guides begin."""
        if isinstance(layer, KerasTensor) and layer._tensor.is_input:
            if self._model.layers:
                raise ValueError("keras.Sequential.add: a keras.Input can only be the first thing added")
            _lockstep.sequential_add(self._model, layer._tensor.layer)
            return
        if not isinstance(layer, Layer):
            raise ValueError(f"keras.Sequential.add: not a lockstep layer: {layer!r}")
        _refuse_subclassed(layer, "keras.Sequential.add")
        if not self._model.layers and layer._input_shape is not None and layer._layer.class_name != "InputLayer":
            _lockstep.sequential_add(self._model, _lockstep.input_layer(list(layer._input_shape)))
        _lockstep.sequential_add(self._model, layer._layer)


def _refuse_subclassed(layer, qualname):
    """A Sequential holds lockstep's layers: a subclass of keras.layers.Layer is traced in a functional model."""
    if layer._subclassed:
        raise ValueError(f"lockstep does not support a keras.layers.Layer subclass ({type(layer).__name__}) in "
                         f"{qualname} yet: call it on a KerasTensor in a functional model (keras.Input, then "
                         f"keras.Model(inputs, outputs))")


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):  # noqa: A002 (Keras' name)
    refuse_arguments("keras.models.load_model", custom_objects=custom_objects)
    return Model(_lockstep.load_model(_not_legacy_h5(filepath, "keras.models.load_model")))


def _not_legacy_h5(filepath, qualname):
    """A whole model in Keras 2's HDF5 file (.h5): refused by name, where lockstep's saved-model
    folder would have been written under that file's name."""
    path = str(filepath)
    if path.lower().endswith((".h5", ".hdf5")):
        raise ValueError(f"{qualname}: lockstep does not support Keras' legacy HDF5 model files (.h5) yet; use a "
                         f".keras file (save_weights / load_weights take .weights.h5)")
    return path
