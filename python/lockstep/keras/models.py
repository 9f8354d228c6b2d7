"""keras.Model / keras.Sequential on lockstep's C++ models: compile, fit, evaluate, predict, save."""
import numbers
from .. import _lockstep, distribute
from .._support import host_array, refuse_arguments
from ..data import Dataset
from . import callbacks as callbacks_module
from . import losses, optimizers
from . import metrics as metrics_module
from .layers import KerasTensor, Layer


class History:
    """keras.callbacks.History: .history maps each log name to its per-epoch values."""

    def __init__(self, epoch, history, params, model):
        self.epoch = list(epoch)
        self.history = {k: list(v) for k, v in history.items()}
        self.params = params
        self.model = model


def _verbose(verbose):
    return -1 if verbose == "auto" else int(verbose)


def _steps(steps):
    return -1 if steps is None else int(steps)


def _callbacks(callbacks, model):
    return [callbacks_module.native(c, model) for c in (callbacks or [])]


class Model:
    """A lockstep model. Made inside a strategy's scope(), it trains on that strategy's replicas."""

    def __init__(self, *args, **kwargs):
        model = args[0] if len(args) == 1 and not kwargs else None
        if not isinstance(model, _lockstep.Model):
            model = _functional(*args, **kwargs)
        self._model = model
        self._strategy = distribute.current_strategy()  # the C++ model refers to it: keep it alive

    @property
    def stop_training(self):
        return self._model.stop_training

    @stop_training.setter
    def stop_training(self, value):
        self._model.stop_training = bool(value)

    @property
    def name(self):
        return self._model.name

    @property
    def layers(self):
        return [Layer(layer) for layer in self._model.layers]

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

    def build(self, input_shape):
        self._model.build([-1 if d is None else int(d) for d in input_shape])

    def summary(self, print_fn=None):
        (print_fn or print)(self._model.summary())

    def count_params(self):
        return self._model.count_params()

    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True):
        refuse_arguments("keras.Model.compile", loss_weights=loss_weights, weighted_metrics=weighted_metrics,
                         run_eagerly=run_eagerly)
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, numbers.Integral):
            raise ValueError(f"keras.Model.compile: steps_per_execution must be a positive integer, got "
                             f"{steps_per_execution!r}")
        if loss is None:
            raise ValueError("keras.Model.compile: lockstep needs a loss")
        given = []
        for m in metrics or []:
            if not isinstance(m, (str, metrics_module.Metric)):
                raise ValueError(f"keras.Model.compile: lockstep takes metrics by name or as keras.metrics "
                                 f"objects, not {m!r}")
            given.append(m if isinstance(m, str) else m._metric)
        self._model.compile(optimizers.get(optimizer), losses.get(loss), given)
        self._optimizer = optimizer if isinstance(optimizer, optimizers.Optimizer) else None
        # Keras' "auto", True or False; the C++ model names them auto, on and off.
        self._model.jit_compile = ("on" if jit_compile else "off") if isinstance(jit_compile, bool) else jit_compile
        self._model.steps_per_execution = int(steps_per_execution)

    @property
    def steps_per_execution(self):
        return self._model.steps_per_execution

    def _dataset(self, x, y, batch_size, what):
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError(f"{what}: y must not be given when x is a tf.data.Dataset (it yields (x, y))")
            return x._ds
        if y is None:
            raise ValueError(f"{what}: y is missing (lockstep trains on (x, y) arrays or a tf.data.Dataset)")
        return Dataset.from_tensor_slices((x, y)).batch(batch_size or 32)._ds

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        refuse_arguments("keras.Model.fit", class_weight=class_weight, sample_weight=sample_weight,
                         validation_freq=None if validation_freq == 1 else validation_freq)
        o = _lockstep.Model.FitOptions()
        o.epochs = int(epochs)
        o.steps_per_epoch = _steps(steps_per_epoch)
        o.batch_size = int(batch_size or 32)
        o.validation_split = float(validation_split)
        o.validation_steps = _steps(validation_steps)
        o.shuffle = bool(shuffle)
        o.initial_epoch = int(initial_epoch)
        o.verbose = _verbose(verbose)
        o.callbacks = _callbacks(callbacks, self)
        if validation_data is not None:
            if isinstance(validation_data, Dataset):
                o.validation_data = validation_data._ds
            else:
                vx, vy = validation_data[:2]
                o.validation_data = self._dataset(vx, vy, validation_batch_size or batch_size, "keras.Model.fit")
        if isinstance(x, Dataset):
            epoch, history = self._model.fit_dataset(self._dataset(x, y, batch_size, "keras.Model.fit"), o)
        else:
            if y is None:
                raise ValueError("keras.Model.fit: y is missing (lockstep trains on (x, y) arrays or a "
                                 "tf.data.Dataset)")
            epoch, history = self._model.fit_arrays(host_array(x, "keras.Model.fit x"),
                                                    host_array(y, "keras.Model.fit y"), o)
        params = {"epochs": o.epochs, "steps": None if o.steps_per_epoch < 0 else o.steps_per_epoch,
                  "verbose": o.verbose}
        self.history = History(epoch, history, params, self)
        return self.history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False):
        refuse_arguments("keras.Model.evaluate", sample_weight=sample_weight)
        verbose = 1 if verbose == "auto" else int(verbose)
        if isinstance(x, Dataset):
            logs = self._model.evaluate_dataset(self._dataset(x, y, batch_size, "keras.Model.evaluate"),
                                                _steps(steps), verbose, _callbacks(callbacks, self))
        else:
            if y is None:
                raise ValueError("keras.Model.evaluate: y is missing")
            logs = self._model.evaluate_arrays(host_array(x, "keras.Model.evaluate x"),
                                               host_array(y, "keras.Model.evaluate y"), int(batch_size or 32),
                                               _steps(steps), verbose, _callbacks(callbacks, self))
        if return_dict:
            return dict(logs)
        values = [logs[name] for name in self.metrics_names if name in logs]
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        refuse_arguments("keras.Model.predict", callbacks=callbacks or None)
        if isinstance(x, Dataset):
            return self._model.predict_dataset(x._ds, _steps(steps))
        return self._model.predict_arrays(host_array(x, "keras.Model.predict x"), int(batch_size or 32),
                                          _steps(steps))

    def __call__(self, inputs, training=None, mask=None):
        """Keras' model(x, training=...): one batch forward, a tf.Tensor (recorded by a GradientTape
        open on this thread; inside strategy.run on the replica's copies of the weights)."""
        refuse_arguments("keras.Model.__call__", mask=mask)
        return _lockstep.model_call(self._model, inputs, bool(training))

    @property
    def trainable_variables(self):
        return _lockstep.trainable_variables(self._model)

    trainable_weights = trainable_variables

    @property
    def variables(self):
        return _lockstep.variables(self._model)

    weights = variables

    @property
    def losses(self):
        """Keras' regularization losses: lockstep's layers take no regularizers, so none."""
        return []

    def save(self, filepath, overwrite=True, **kwargs):
        """A path ending in .keras: a Keras 3 archive; another: lockstep's saved-model folder."""
        refuse_arguments("keras.Model.save", **kwargs)
        self._model.save(str(filepath))

    def save_weights(self, filepath, overwrite=True):
        self._model.save_weights(str(filepath))

    def load_weights(self, filepath, skip_mismatch=False):
        refuse_arguments("keras.Model.load_weights", skip_mismatch=skip_mismatch)
        self._model.load_weights(str(filepath))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"lockstep does not support tf.keras.Model.{name} yet")


def _functional(inputs=None, outputs=None, name=None, trainable=True):
    """keras.Model(inputs, outputs): one input and one output (a list of one is taken too)."""
    if inputs is None and outputs is None:
        raise NotImplementedError("lockstep's Python package does not support subclassing keras.Model yet; use "
                                  "keras.Model(inputs, outputs) or keras.Sequential")
    refuse_arguments("keras.Model", trainable=None if trainable else True)

    def one(value, what):
        if isinstance(value, (list, tuple)) and len(value) == 1:
            value = value[0]
        if isinstance(value, (list, tuple, dict)):
            raise ValueError(f"lockstep does not support a keras.Model with several {what} yet")
        if not isinstance(value, KerasTensor):
            raise ValueError(f"keras.Model: {what} must be KerasTensors (keras.Input and layers called on it), "
                             f"not {type(value).__name__}")
        return value._tensor

    return _lockstep.functional(one(inputs, "inputs"), one(outputs, "outputs"), name or "functional")


class Sequential(Model):
    """keras.Sequential: a stack of layers. A first keras.Input, or a first layer given input_shape=,
    builds it at once (shape mismatches are reported here, not in fit)."""

    def __init__(self, layers=None, name=None, trainable=True):
        refuse_arguments("keras.Sequential", trainable=None if trainable else True)
        native = []
        for i, layer in enumerate(layers or []):
            if i == 0 and isinstance(layer, KerasTensor) and layer._tensor.is_input:  # keras.Input first
                native.append(layer._tensor.layer)
                continue
            if not isinstance(layer, Layer):
                raise ValueError(f"keras.Sequential: item {i} is not a lockstep layer: {layer!r}")
            if i == 0 and layer._input_shape is not None and layer._layer.class_name != "InputLayer":
                native.append(_lockstep.input_layer(list(layer._input_shape)))
            native.append(layer._layer)
        super().__init__(_lockstep.sequential(native, name or "sequential"))

    def add(self, layer):
        if not isinstance(layer, Layer):
            raise ValueError(f"keras.Sequential.add: not a lockstep layer: {layer!r}")
        if not self._model.layers and layer._input_shape is not None and layer._layer.class_name != "InputLayer":
            _lockstep.sequential_add(self._model, _lockstep.input_layer(list(layer._input_shape)))
        _lockstep.sequential_add(self._model, layer._layer)


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):  # noqa: A002 (Keras' name)
    refuse_arguments("keras.models.load_model", custom_objects=custom_objects)
    return Model(_lockstep.load_model(str(filepath)))
