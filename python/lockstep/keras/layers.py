"""keras.layers: every layer class lockstep's C++ layer registry has, made from Keras' arguments.

The table below gives, for each class, Keras' positional arguments and the defaults of its
signature (keras.layers.X.__init__); the C++ layer's from_config takes the full config and refuses
a value it cannot take, and the binding refuses an argument the layer does not have. A class the
registry has but this table lacks (a newly added layer) is still reachable with keyword arguments.
"""
import json

import numpy as np

from .. import _lockstep
from .._support import refuse_arguments, unsupported_getattr

_unsupported = unsupported_getattr("tf.keras.layers")

_IMAGE = {"data_format": None}
_CONV = {"strides": (1, 1), "padding": "valid", "dilation_rate": (1, 1), "activation": None, "use_bias": True,
         "bias_initializer": "zeros", **_IMAGE}
_POOL = {"pool_size": (2, 2), "strides": None, "padding": "valid", **_IMAGE}
_NORM = {"axis": -1, "epsilon": 1e-3, "center": True, "scale": True, "beta_initializer": "zeros",
         "gamma_initializer": "ones"}

# An optional argument whose default the C++ layer's from_config has (Keras' own): left out of the config.
_LAYERS_DEFAULT = object()

# class name: (positional argument names, Keras' defaults)
_SIGNATURES = {
    "Dense": (("units", "activation"), {"activation": None, "use_bias": True,
                                        "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}),
    "Dropout": (("rate", "noise_shape", "seed"), {"noise_shape": None, "seed": None}),
    "Activation": (("activation",), {}),
    "Flatten": (("data_format",), dict(_IMAGE)),
    "Reshape": (("target_shape",), {}),
    "Conv2D": (("filters", "kernel_size", "strides", "padding"),
               {**_CONV, "groups": 1, "kernel_initializer": "glorot_uniform"}),
    "DepthwiseConv2D": (("kernel_size", "strides", "padding", "depth_multiplier"),
                        {**_CONV, "depth_multiplier": 1, "depthwise_initializer": "glorot_uniform"}),
    "MaxPooling2D": (("pool_size", "strides", "padding"), dict(_POOL)),
    "AveragePooling2D": (("pool_size", "strides", "padding"), dict(_POOL)),
    "GlobalAveragePooling2D": (("data_format", "keepdims"), {**_IMAGE, "keepdims": False}),
    "ZeroPadding2D": (("padding",), {"padding": (1, 1), **_IMAGE}),
    "Rescaling": (("scale", "offset"), {"offset": 0.0}),
    "BatchNormalization": (("axis", "momentum", "epsilon"),
                           {**_NORM, "momentum": 0.99, "moving_mean_initializer": "zeros",
                            "moving_variance_initializer": "ones"}),
    "LayerNormalization": (("axis", "epsilon"), dict(_NORM)),
    "Add": ((), {}),
    "Concatenate": (("axis",), {"axis": _LAYERS_DEFAULT}),
    "Dot": (("axes", "normalize"), {"normalize": _LAYERS_DEFAULT}),
    "Softmax": (("axis",), {"axis": _LAYERS_DEFAULT}),
    "Embedding": (("input_dim", "output_dim", "embeddings_initializer"), {"embeddings_initializer": _LAYERS_DEFAULT}),
    "GlobalAveragePooling1D": (("data_format",), {"data_format": _LAYERS_DEFAULT}),
    "RepeatVector": (("n",), {}),
    "Permute": (("dims",), {}),
    "MultiHeadAttention": (("num_heads", "key_dim", "value_dim", "dropout", "use_bias", "output_shape"),
                           {k: _LAYERS_DEFAULT for k in ("value_dim", "dropout", "use_bias", "output_shape")}),
    "PositionEmbedding": (("sequence_length",), {}),
}


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    return value


_NUMPY_DTYPES = ("float32", "float16", "int32", "int64", "uint8")


def assign_weights(qualname, owner, variables, weights):
    """Keras' set_weights: every variable from an array of its shape, all checked before any is
    assigned (on every replica of a mirrored variable)."""
    weights = list(weights)
    if len(weights) != len(variables):
        raise ValueError(f"{qualname}: '{owner}' has {len(variables)} weights, got {len(weights)}")
    arrays = []
    for v, w in zip(variables, weights):
        a = np.asarray(w)
        if tuple(a.shape) != tuple(v.shape):
            raise ValueError(f"{qualname}: weight '{v.name}' has shape {tuple(v.shape)}, got an array of shape "
                             f"{a.shape}")
        arrays.append(a.astype(v.dtype) if v.dtype in _NUMPY_DTYPES else a)
    for v, a in zip(variables, arrays):
        v.assign(a)


def refuse_frozen(qualname, trainable):
    """Keras' freezing (layer.trainable = False): lockstep trains every variable a layer has, so a
    frozen layer would still train; refused by name."""
    if not trainable:
        raise ValueError(f"lockstep does not support {qualname}.trainable = False (freezing) yet: fit trains every "
                         f"weight")


class Layer:
    """A lockstep layer (lockstep._lockstep.Layer) with the input shape Keras lets a first layer declare."""

    def __init__(self, layer, input_shape=None):
        self._layer = layer
        self._input_shape = None if input_shape is None else tuple(input_shape)

    @property
    def name(self):
        return self._layer.name

    def get_config(self):
        return json.loads(self._layer.get_config())

    @property
    def weights(self):
        """Keras' layer.weights: its variables (tf.Variable), in the order Keras gives them."""
        return list(self._layer.variables)

    variables = weights

    def get_weights(self):
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights):
        assign_weights(f"keras.layers.{self._layer.class_name}.set_weights", self.name, self.weights, weights)

    @property
    def trainable(self):
        return True

    @trainable.setter
    def trainable(self, value):
        refuse_frozen(f"keras.layers.{self._layer.class_name}", value)

    def __call__(self, *args, **kwargs):
        """The functional API: called on a KerasTensor (keras.Input or a layer's output), or on a list
        of them (merge layers), gives the KerasTensor of its output. MultiHeadAttention takes Keras'
        mha(query, value[, key], attention_mask=..., use_causal_mask=...)."""
        class_name = self._layer.class_name
        training = kwargs.pop("training", None)
        if training is not None:  # False too: a layer fixed in inference mode inside fit (Keras' freezing)
            raise ValueError(f"lockstep does not support the argument training={training!r} of keras.layers."
                             f"{class_name}.__call__ yet: fit runs every layer in training mode, evaluate and "
                             f"predict in inference mode")
        if self._layer.keras_positional_call:
            return self._call_attention(args, kwargs)
        if len(args) != 1 or kwargs:
            extra = next(iter(kwargs)) if kwargs else "a second positional argument"
            raise ValueError(f"lockstep does not support {extra} in keras.layers.{class_name}.__call__ yet")
        inputs = args[0]
        if isinstance(inputs, KerasTensor):
            return KerasTensor(_lockstep.call_layer(self._layer, inputs._tensor))
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(x, KerasTensor) for x in inputs):
            return KerasTensor(_lockstep.call_layer_on_list(self._layer, [x._tensor for x in inputs]))
        raise NotImplementedError(f"lockstep does not support calling keras.layers.{class_name} on "
                                  f"{type(inputs).__name__} yet: only on keras.Input's KerasTensors (the functional "
                                  f"API); call the model on tensors instead")

    def _call_attention(self, args, kwargs):
        """Keras' MultiHeadAttention.__call__(query, value, key=None, ..., attention_mask=None,
        use_causal_mask=False); the per-tensor masks and return_attention_scores are refused by name."""
        qualname = f"keras.layers.{self._layer.class_name}.__call__"
        names = ("query", "value", "key")
        if len(args) > len(names):
            raise TypeError(f"{qualname} takes at most 3 positional arguments (query, value, key), got {len(args)}")
        given = dict(zip(names, args))
        for name in names:
            if name in kwargs:
                if name in given:
                    raise TypeError(f"{qualname} got two values for argument '{name}'")
                given[name] = kwargs.pop(name)
        mask = kwargs.pop("attention_mask", None)
        causal = kwargs.pop("use_causal_mask", False)
        refuse_arguments(qualname, **kwargs)  # query_mask, value_mask, key_mask, return_attention_scores
        if given.get("key") is None:
            given.pop("key", None)
        if "query" not in given or "value" not in given:
            raise TypeError(f"{qualname} needs query and value")
        tensors = [given[name] for name in names if name in given]
        if not all(isinstance(t, KerasTensor) for t in tensors) or not (mask is None or isinstance(mask, KerasTensor)):
            raise NotImplementedError(f"lockstep does not support calling keras.layers.{self._layer.class_name} on "
                                      f"anything but KerasTensors yet (the functional API)")
        return KerasTensor(_lockstep.call_attention(self._layer, [t._tensor for t in tensors], bool(causal),
                                                    None if mask is None else mask._tensor))

    def __repr__(self):
        return f"<lockstep.keras.layers.{self._layer.class_name} name={self.name}>"


def _layer_class(class_name):
    positional, defaults = _SIGNATURES.get(class_name, ((), {}))

    def make(*args, **kwargs):
        if len(args) > len(positional):
            raise TypeError(f"keras.layers.{class_name} takes at most {len(positional)} positional arguments "
                            f"({', '.join(positional)}), got {len(args)}")
        for name, value in zip(positional, args):
            if name in kwargs:
                raise TypeError(f"keras.layers.{class_name} got two values for argument '{name}'")
            kwargs[name] = value
        input_shape = kwargs.pop("input_shape", None)
        config = {k: v for k, v in {**defaults, **kwargs}.items() if v is not _LAYERS_DEFAULT}
        config.setdefault("name", "")
        if config.get("activation", "") is None:
            config["activation"] = "linear"
        for key in ("kernel_initializer", "bias_initializer", "depthwise_initializer"):
            if config.get(key) is not None and not isinstance(config[key], str):
                raise ValueError(f"keras.layers.{class_name}: lockstep takes {key} by name only "
                                 f"(e.g. 'glorot_uniform'), not {config[key]!r}")
        missing = [name for name in positional if name not in config and name not in defaults]
        if config.get("strides", "") is None:  # pooling: strides default to pool_size
            del config["strides"]
        if missing:
            raise TypeError(f"keras.layers.{class_name} missing required argument '{missing[0]}'")
        config = {k: _jsonable(v) for k, v in config.items()}
        return Layer(_lockstep.make_layer(class_name, json.dumps(config)), input_shape)

    make.__name__ = make.__qualname__ = class_name
    make.__doc__ = f"keras.layers.{class_name}({', '.join(positional)}, ...) on lockstep's {class_name}."
    return make


class InputLayer(Layer):
    """What keras.Input gives: the shape of one example (no batch dimension)."""

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None):
        if shape is None:
            raise TypeError("keras.Input needs shape=")
        shape = tuple(int(d) for d in shape)
        super().__init__(_lockstep.input_layer(list(shape)), shape)
        self.shape = (None,) + shape


class KerasTensor:
    """Keras' symbolic tensor: keras.Input, or a layer's output on one; .shape has None for the batch."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.shape = tuple(None if d < 0 else d for d in tensor.shape)
        self.dtype = "float32"

    def __repr__(self):
        return f"<KerasTensor shape={self.shape} from {self._tensor.layer.class_name}>"


def Input(shape=None, batch_size=None, dtype=None, name=None, **kwargs):  # noqa: N802 (Keras' name)
    if kwargs:
        raise ValueError(f"lockstep does not support the argument {next(iter(kwargs))} of keras.Input yet")
    if shape is None:
        raise TypeError("keras.Input needs shape=")
    if any(d is None for d in shape):
        raise ValueError(f"lockstep does not support variable sizes (None) in keras.Input's shape yet: give every "
                         f"size of an example, not {tuple(shape)} (pad sequences to one length)")
    return KerasTensor(_lockstep.keras_input([int(d) for d in shape], name or ""))


def __getattr__(name):
    if not name.startswith("_") and _lockstep.has_layer_class(name) and name != "InputLayer":
        made = _layer_class(name)
        globals()[name] = made
        return made
    return _unsupported(name)


def __dir__():
    return sorted(set(globals()) | set(_lockstep.layer_class_names().split(", ")))
