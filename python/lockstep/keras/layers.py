"""keras.layers: every layer class lockstep's C++ layer registry has, made from Keras' arguments.

The table below gives, for each class, Keras' positional arguments and the defaults of its
signature (keras.layers.X.__init__); the C++ layer's from_config takes the full config and refuses
a value it cannot take, and the binding refuses an argument the layer does not have. A class the
registry has but this table lacks (a newly added layer) is still reachable with keyword arguments.
"""
import inspect
import json
import numbers
import re
import warnings

import numpy as np

from .. import _lockstep
from .._support import refuse_arguments, training_argument, unsupported_getattr

_unsupported = unsupported_getattr("tf.keras.layers")

_IMAGE = {"data_format": None}
_CONV = {"strides": (1, 1), "padding": "valid", "dilation_rate": (1, 1), "activation": None, "use_bias": True,
         "bias_initializer": "zeros", **_IMAGE}
_POOL = {"pool_size": (2, 2), "strides": None, "padding": "valid", **_IMAGE}
_AFFINE = {"fill_mode": "reflect", "interpolation": "bilinear", "seed": None, "fill_value": 0.0}
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
    "GlobalMaxPooling2D": (("data_format", "keepdims"), {**_IMAGE, "keepdims": False}),
    "Conv1D": (("filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate", "groups",
                "activation", "use_bias", "kernel_initializer", "bias_initializer"),
               {**_CONV, "strides": 1, "dilation_rate": 1, "groups": 1, "kernel_initializer": "glorot_uniform"}),
    "MaxPooling1D": (("pool_size", "strides", "padding", "data_format"), {**_POOL, "pool_size": 2}),
    "AveragePooling1D": (("pool_size", "strides", "padding", "data_format"), {**_POOL, "pool_size": 2}),
    "GlobalMaxPooling1D": (("data_format", "keepdims"), {**_IMAGE, "keepdims": False}),
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
    "Masking": (("mask_value",), {"mask_value": 0.0}),
    "Embedding": (("input_dim", "output_dim", "embeddings_initializer"), {"embeddings_initializer": _LAYERS_DEFAULT}),
    "GlobalAveragePooling1D": (("data_format",), {"data_format": _LAYERS_DEFAULT}),
    "RepeatVector": (("n",), {}),
    "Permute": (("dims",), {}),
    "MultiHeadAttention": (("num_heads", "key_dim", "value_dim", "dropout", "use_bias", "output_shape"),
                           {k: _LAYERS_DEFAULT for k in ("value_dim", "dropout", "use_bias", "output_shape")}),
    "PositionEmbedding": (("sequence_length",), {}),
    # Keras' recurrent layers: units first, every other argument Keras' default (the C++ layer's).
    "SimpleRNN": (("units", "activation", "use_bias"), {k: _LAYERS_DEFAULT for k in ("activation", "use_bias")}),
    "LSTM": (("units", "activation", "recurrent_activation", "use_bias"),
             {k: _LAYERS_DEFAULT for k in ("activation", "recurrent_activation", "use_bias")}),
    "GRU": (("units", "activation", "recurrent_activation", "use_bias"),
            {k: _LAYERS_DEFAULT for k in ("activation", "recurrent_activation", "use_bias")}),
    # Keras' Bidirectional(layer, merge_mode="concat", backward_layer=None): the layers by their configs.
    "Bidirectional": (("layer", "merge_mode", "backward_layer"),
                      {"merge_mode": "concat", "backward_layer": _LAYERS_DEFAULT}),
    # Keras 3's advanced activations (keras/src/layers/activations/) and SeparableConv2D.
    "ReLU": (("max_value", "negative_slope", "threshold"),
             {"max_value": None, "negative_slope": 0.0, "threshold": 0.0}),
    "LeakyReLU": (("negative_slope",), {"negative_slope": 0.3}),
    "ELU": (("alpha",), {"alpha": 1.0}),
    "PReLU": (("alpha_initializer", "alpha_regularizer", "alpha_constraint", "shared_axes"),
              {"alpha_initializer": "zeros", "alpha_regularizer": None, "alpha_constraint": None, "shared_axes": None}),
    "SeparableConv2D": (("filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate",
                         "depth_multiplier", "activation", "use_bias", "depthwise_initializer",
                         "pointwise_initializer", "bias_initializer"),
                        {**_CONV, "depth_multiplier": 1, "depthwise_initializer": "glorot_uniform",
                         "pointwise_initializer": "glorot_uniform"}),
    # The decoder side of autoencoders and U-Nets.
    "Conv2DTranspose": (("filters", "kernel_size", "strides", "padding", "output_padding", "data_format",
                         "dilation_rate", "activation", "use_bias", "kernel_initializer", "bias_initializer"),
                        {**_CONV, "output_padding": None, "kernel_initializer": "glorot_uniform"}),
    "UpSampling2D": (("size", "data_format", "interpolation"), {"size": (2, 2), **_IMAGE, "interpolation": "nearest"}),
    "UpSampling1D": (("size",), {"size": 2}),
    "Cropping2D": (("cropping", "data_format"), {"cropping": ((0, 0), (0, 0)), **_IMAGE}),
    "ZeroPadding1D": (("padding", "data_format"), {"padding": 1, **_IMAGE}),
    # The rest of Keras 3's 1D convolution family.
    "Conv1DTranspose": (("filters", "kernel_size", "strides", "padding", "output_padding", "data_format",
                         "dilation_rate", "activation", "use_bias", "kernel_initializer", "bias_initializer"),
                        {**_CONV, "strides": 1, "dilation_rate": 1, "output_padding": None,
                         "kernel_initializer": "glorot_uniform"}),
    "DepthwiseConv1D": (("kernel_size", "strides", "padding", "depth_multiplier", "data_format", "dilation_rate",
                         "activation", "use_bias", "depthwise_initializer", "bias_initializer"),
                        {**_CONV, "strides": 1, "dilation_rate": 1, "depth_multiplier": 1,
                         "depthwise_initializer": "glorot_uniform"}),
    "SeparableConv1D": (("filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate",
                         "depth_multiplier", "activation", "use_bias", "depthwise_initializer",
                         "pointwise_initializer", "bias_initializer"),
                        {**_CONV, "strides": 1, "dilation_rate": 1, "depth_multiplier": 1,
                         "depthwise_initializer": "glorot_uniform", "pointwise_initializer": "glorot_uniform"}),
    "Cropping1D": (("cropping",), {"cropping": (1, 1)}),
    # Keras 3's other regularization and normalization layers, and Identity.
    "SpatialDropout1D": (("rate", "seed"), {"seed": None}),
    "SpatialDropout2D": (("rate", "data_format", "seed"), {**_IMAGE, "seed": None}),
    "GaussianNoise": (("stddev", "seed"), {"seed": None}),
    "GaussianDropout": (("rate", "seed"), {"seed": None}),
    "AlphaDropout": (("rate", "noise_shape", "seed"), {"noise_shape": None, "seed": None}),
    "GroupNormalization": (("groups", "axis", "epsilon", "center", "scale", "beta_initializer", "gamma_initializer"),
                           {**_NORM, "groups": 32}),
    "UnitNormalization": (("axis",), {"axis": -1}),
    "Identity": ((), {}),
    # Keras 3's preprocessing layers inside a model (Normalization.adapt: Layer.adapt).
    "Normalization": (("axis", "mean", "variance", "invert"),
                      {"axis": -1, "mean": None, "variance": None, "invert": False}),
    "RandomFlip": (("mode", "seed", "data_format"), {"mode": "horizontal_and_vertical", "seed": None, **_IMAGE}),
    "Resizing": (("height", "width", "interpolation", "crop_to_aspect_ratio", "pad_to_aspect_ratio", "fill_mode",
                  "fill_value", "antialias", "data_format"),
                 {"interpolation": "bilinear", "crop_to_aspect_ratio": False, "pad_to_aspect_ratio": False,
                  "fill_mode": "constant", "fill_value": 0.0, "antialias": False, **_IMAGE}),
    "CenterCrop": (("height", "width", "data_format"), dict(_IMAGE)),
    "RandomCrop": (("height", "width", "seed", "data_format"), {"seed": None, **_IMAGE}),
    # Keras 3's SpatialDropout3D and the colour augmentations RandomContrast, RandomBrightness.
    "SpatialDropout3D": (("rate", "data_format", "seed"), {**_IMAGE, "seed": None}),
    "RandomContrast": (("factor", "value_range", "seed", "data_format"),
                       {"value_range": (0, 255), "seed": None, **_IMAGE}),
    "RandomBrightness": (("factor", "value_range", "seed", "data_format"),
                         {"value_range": (0, 255), "seed": None, **_IMAGE}),
    # Keras 3's geometric augmentations RandomTranslation, RandomRotation, RandomZoom.
    "RandomTranslation": (("height_factor", "width_factor", "fill_mode", "interpolation", "seed", "fill_value",
                           "data_format"), {**_AFFINE, **_IMAGE}),
    "RandomRotation": (("factor", "fill_mode", "interpolation", "seed", "fill_value", "data_format"),
                       {**_AFFINE, **_IMAGE}),
    "RandomZoom": (("height_factor", "width_factor", "fill_mode", "interpolation", "seed", "fill_value",
                    "data_format"), {"width_factor": None, **_AFFINE, **_IMAGE}),
}


# Keras 3's deprecated argument names it still takes: class name: {old: new}.
_DEPRECATED = {"LeakyReLU": {"alpha": "negative_slope"}}


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, (list, np.ndarray)):  # Normalization's mean and variance
        return np.asarray(value).tolist() if isinstance(value, np.ndarray) else [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    if isinstance(value, Layer):  # a wrapper's layer (Bidirectional's): Keras' {"class_name", "config"}
        if value._subclassed:
            raise ValueError(f"lockstep wraps its own layers only, not the subclassed layer '{value.name}'")
        return {"class_name": value._layer.class_name, "config": value.get_config()}
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


class Layer:
    """Keras' keras.layers.Layer, in two roles. lockstep's own layers (keras.layers.Dense(...) and
    the rest) wrap a C++ layer (lockstep._lockstep.Layer), with the input shape Keras lets a first
    layer declare. A user's subclass composes them, as Keras' examples write attention blocks: its
    __init__ sets built-in layers (or models) as attributes, alone or in lists and dicts, and its
    call(inputs) calls them. Called on KerasTensors, the subclass runs its call in Python there and
    then, as Keras traces it: the result is those layers called in the graph being built, so a
    keras.Model of it is a functional model of lockstep's layers (saved to .keras as one, and loaded
    back without custom_objects). Its weights are its sublayers'."""

    def __init__(self, *args, **kwargs):
        if args and isinstance(args[0], _lockstep.Layer):
            self._init_native(*args, **kwargs)
        else:
            self._init_subclass(*args, **kwargs)

    def _init_native(self, layer, input_shape=None):
        self._layer = layer
        self._input_shape = None if input_shape is None else tuple(input_shape)

    def _init_subclass(self, *args, name=None, dtype=None, trainable=True, **kwargs):
        qualname = f"{type(self).__name__}.__init__ (a keras.layers.Layer subclass)"
        if args:
            raise TypeError(f"{qualname}: keras.layers.Layer takes keyword arguments only (name=, dtype=), got "
                            f"{len(args)} positional")
        if type(self) is Layer:
            raise TypeError("keras.layers.Layer is a base class: subclass it (with a call method) or use a layer of "
                            "keras.layers")
        if dtype not in (None, "float32"):
            raise ValueError(f"lockstep does not support dtype={dtype!r} in {qualname} yet: its layers take their "
                             f"own dtype (float32, or the global mixed precision policy)")
        refuse_arguments(qualname, **kwargs)
        self._name = name or snake_case(type(self).__name__)
        self.built = False
        self._trainable = bool(trainable)  # applied to the sublayers as they are set (__setattr__)

    @property
    def _subclassed(self):
        return "_layer" not in vars(self)

    @property
    def _qualname(self):
        return type(self).__name__ if self._subclassed else f"keras.layers.{self._layer.class_name}"

    @property
    def name(self):
        return self._name if self._subclassed else self._layer.name

    def get_config(self):
        if self._subclassed:  # Keras' base Layer.get_config
            return {"name": self.name, "trainable": self.trainable, "dtype": "float32"}
        return json.loads(self._layer.get_config())

    @property
    def weights(self):
        """Keras' layer.weights: its variables (tf.Variable), in the order Keras gives them; a
        subclass's are its sublayers' in the order its __init__ set them, each once (none before
        the subclass is first called in a model that builds them)."""
        return gathered_weights(self) if self._subclassed else list(self._layer.variables)

    variables = weights

    @property
    def trainable_weights(self):
        """Keras 3's: the weights whose own flag is set (a frozen layer's are cleared), what fit
        trains once compiled."""
        return [v for v in self.weights if v.trainable]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        return [v for v in self.weights if not v.trainable]

    non_trainable_variables = non_trainable_weights

    def get_weights(self):
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights):
        assign_weights(f"{self._qualname}.set_weights", self.name, self.weights, weights)

    @property
    def trainable(self):
        return self._trainable if self._subclassed else self._layer.trainable

    @trainable.setter
    def trainable(self, value):
        """Keras' freezing: set on this layer and every layer and model under it (Keras' setter is
        recursive); fit takes it at the next compile."""
        if self._subclassed:
            self._trainable = bool(value)
            for sub in sublayers_of(self):
                sub.trainable = value
        else:
            self._layer.trainable = bool(value)

    def __setattr__(self, name, value):
        # A sublayer set on a frozen subclass is frozen too (Keras freezes what the layer tracks).
        if not name.startswith("_") and not vars(self).get("_trainable", True):
            for sub in _sublayers_in(value):
                sub.trainable = False
        super().__setattr__(name, value)

    def build(self, input_shape):
        """Keras' build: a subclass may override it to make its sublayers once the input shape is
        known (its own weights, add_weight, are refused)."""
        self.built = True

    def adapt(self, data, batch_size=None, steps=None):
        """Keras' Normalization.adapt(data): a NumPy array (one batch), a lockstep Dataset (its
        batches; an (x, y) element gives x) or an iterable of batches; the C++ layer computes and
        combines the statistics as Keras does. Other layers have no adapt."""
        if self._subclassed or self._layer.class_name != "Normalization":
            raise AttributeError(f"'{self._qualname}' has no adapt()")
        if batch_size is not None or steps is not None:
            raise ValueError("lockstep's Normalization.adapt takes the data only (Keras 3 ignores batch_size and steps)")
        if isinstance(data, np.ndarray) or hasattr(data, "__array__") and not hasattr(data, "__iter__"):
            batches = [data]
        else:
            batches = list(data.as_numpy_iterator() if hasattr(data, "as_numpy_iterator") else data)
            batches = [b[0] if isinstance(b, tuple) else b for b in batches]
        arrays = []
        for b in batches:
            a = np.asarray(b)
            if a.dtype.kind not in "fiub":
                raise ValueError(f"lockstep's Normalization adapts to numeric data only, got dtype {a.dtype} "
                                 f"(string data: keras.layers.StringLookup, which lockstep does not have)")
            arrays.append(np.ascontiguousarray(a, dtype=np.float32))
        _lockstep.adapt_normalization(self._layer, arrays)

    def add_weight(self, *args, **kwargs):
        raise NotImplementedError(
            f"lockstep does not support {self._qualname}.add_weight (a subclassed layer's own variables) yet: compose "
            f"built-in layers instead (set keras.layers.Dense, Embedding, PositionEmbedding, ... as attributes in "
            f"__init__ and call them in call); their weights are the layer's")

    add_variable = add_weight

    def add_loss(self, *args, **kwargs):
        raise NotImplementedError(f"lockstep does not support {self._qualname}.add_loss yet: give the model's loss to "
                                  f"compile")

    def __call__(self, *args, **kwargs):
        """The functional API: called on a KerasTensor (keras.Input or a layer's output), or on a list
        of them (merge layers), gives the KerasTensor of its output. MultiHeadAttention takes Keras'
        mha(query, value[, key], attention_mask=..., use_causal_mask=..., return_attention_scores=...);
        Softmax and GlobalAveragePooling1D a mask=KerasTensor (Keras' layer(x, mask=m)); SimpleRNN, LSTM
        and GRU initial_state=[h, (c)], and with return_state=True give [output, *states] (Bidirectional with
        merge_mode=None: [forward output, backward output]). A subclass runs its call.
        training=False runs this call in inference mode always (fit too: Dropout off, BatchNormalization
        on its moving statistics), True in training mode always (predict too), None (Keras' default)
        in the mode of fit, evaluate, predict or the model's call."""
        training = training_argument(f"{self._qualname}.__call__", kwargs.pop("training", None))
        if self._subclassed:
            if training is not None:
                raise ValueError(f"lockstep does not support the argument training={training!r} of "
                                 f"{self._qualname}.__call__ (a subclassed layer's) yet: pass it to the layers its "
                                 f"call calls instead")
            if "_name" not in vars(self):
                raise TypeError(f"{self._qualname}.__init__ must call super().__init__() (keras.layers.Layer's)")
            return trace_call(self, args, kwargs)
        class_name = self._layer.class_name
        if self._layer.keras_positional_call:
            return self._call_attention(args, kwargs, training)
        mask = kwargs.pop("mask", None) if self._layer.call_takes_mask else None
        initial_state = kwargs.pop("initial_state", None)
        if initial_state is not None:  # Keras' rnn(x, initial_state=[h, c]) (one tensor: [h])
            states = [initial_state] if isinstance(initial_state, KerasTensor) else list(initial_state)
            if not all(isinstance(h, KerasTensor) for h in states):
                raise NotImplementedError(f"lockstep does not support initial_state of anything but KerasTensors in "
                                          f"keras.layers.{class_name}.__call__ yet (the functional API)")
            initial_state = [h._tensor for h in states]
        if len(args) != 1 or kwargs:
            extra = next(iter(kwargs)) if kwargs else "a second positional argument"
            raise ValueError(f"lockstep does not support {extra} in keras.layers.{class_name}.__call__ yet")
        inputs = args[0]
        if mask is not None and not (isinstance(mask, KerasTensor) and isinstance(inputs, KerasTensor)):
            raise NotImplementedError(f"lockstep does not support mask={type(mask).__name__} in keras.layers."
                                      f"{class_name}.__call__ yet: only a KerasTensor of the graph, with one input")
        if isinstance(inputs, KerasTensor):
            outs = [KerasTensor(t) for t in _lockstep.call_layer(self._layer, inputs._tensor, training,
                                                                 None if mask is None else mask._tensor,
                                                                 initial_state)]
            # Keras' return_state: [output, *states]; Bidirectional(merge_mode=None): [forward, backward]
            return outs[0] if len(outs) == 1 else outs
        if initial_state is not None:
            raise ValueError(f"keras.layers.{class_name}.__call__ takes initial_state with one input tensor only")
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(x, KerasTensor) for x in inputs):
            return KerasTensor(_lockstep.call_layer_on_list(self._layer, [x._tensor for x in inputs], training))
        raise NotImplementedError(f"lockstep does not support calling keras.layers.{class_name} on "
                                  f"{type(inputs).__name__} yet: only on keras.Input's KerasTensors (the functional "
                                  f"API); call the model on tensors instead")

    def _call_attention(self, args, kwargs, training):
        """Keras' MultiHeadAttention.__call__(query, value, key=None, ..., attention_mask=None,
        use_causal_mask=False, return_attention_scores=False: then (output, scores)); the per-tensor masks
        are refused by name."""
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
        scores = bool(kwargs.pop("return_attention_scores", False))
        refuse_arguments(qualname, **kwargs)  # query_mask, value_mask, key_mask
        if given.get("key") is None:
            given.pop("key", None)
        if "query" not in given or "value" not in given:
            raise TypeError(f"{qualname} needs query and value")
        tensors = [given[name] for name in names if name in given]
        if not all(isinstance(t, KerasTensor) for t in tensors) or not (mask is None or isinstance(mask, KerasTensor)):
            raise NotImplementedError(f"lockstep does not support calling keras.layers.{self._layer.class_name} on "
                                      f"anything but KerasTensors yet (the functional API)")
        outs = [KerasTensor(t) for t in _lockstep.call_attention(self._layer, [t._tensor for t in tensors],
                                                                 bool(causal), None if mask is None else mask._tensor,
                                                                 training, scores)]
        return tuple(outs) if scores else outs[0]  # Keras' (output, scores)

    def __repr__(self):
        if self._subclassed:
            return f"<{type(self).__name__} name={self.name}>"
        return f"<lockstep.keras.layers.{self._layer.class_name} name={self.name}>"


def snake_case(class_name):
    """Keras' default name of a layer of this class: TransformerBlock -> transformer_block."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()


def sublayers_of(owner):
    """The layers and models a subclass set as attributes (alone, or in lists, tuples and dicts), in
    the order it set them, each once."""
    return _sublayers_in(list(vars(owner).values()))


def _sublayers_in(value):
    """The layers and models in `value` (one, or lists, tuples and dicts of them), each once."""
    from .models import Model  # models imports this module

    found, seen = [], set()

    def visit(value):
        if isinstance(value, (Layer, Model)):
            if id(value) not in seen:
                seen.add(id(value))
                found.append(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)

    visit(value)
    return found


def gathered_weights(owner):
    """A subclass's weights (keras.layers.Layer's or an unbuilt keras.Model's): those of the
    built-in layers it holds, in the order its __init__ set them, each layer once however often
    it is held (a layer's Python object is one per C++ layer while that is alive: kept in `held`)."""
    held, seen = [], set()

    def visit(sub):
        if isinstance(sub, Layer) and not sub._subclassed:
            natives = [sub._layer]
        elif "_model" in vars(sub):  # a model: its layers, as built
            natives = list(sub._model.layers)
        else:  # a subclass: its own sublayers
            natives = []
            for inner in sublayers_of(sub):
                visit(inner)
        for native in natives:
            if id(native) not in seen:
                seen.add(id(native))
                held.append(native)

    for sub in sublayers_of(owner):
        visit(sub)
    return [v for native in held for v in native.variables]


def flat_keras_tensors(value):
    """The KerasTensors in a call's argument, nested in lists, tuples and dicts; None where the
    argument holds anything else (a layer called on data, not in a model being built)."""
    if isinstance(value, KerasTensor):
        return [value]
    if isinstance(value, (list, tuple, dict)):
        flat = []
        for v in value.values() if isinstance(value, dict) else value:
            inner = flat_keras_tensors(v)
            if inner is None:
                return None
            flat += inner
        return flat
    return None


def _shape_of(value):
    """Keras' input_shape argument of build: a shape, or lists and dicts of them as the inputs nest."""
    if isinstance(value, KerasTensor):
        return value.shape
    if isinstance(value, dict):
        return {k: _shape_of(v) for k, v in value.items()}
    return [_shape_of(v) for v in value]


def trace_call(owner, args, kwargs):
    """A subclass's call (keras.layers.Layer's or keras.Model's) on KerasTensors, run in Python as
    Keras traces it: the built-in layers it calls join the graph being built, and its result, one
    KerasTensor or lists and dicts of them, is returned. The call's mask argument is left None (the
    layers it calls carry masks themselves); training is None (fit trains, evaluate and predict infer)."""
    qualname = f"{type(owner).__name__}.call"
    mask = kwargs.pop("mask", None)
    if mask is not None:
        raise ValueError(f"lockstep does not support the argument mask= of {type(owner).__name__}.__call__ yet: the "
                         f"layers it calls carry the masks of their inputs themselves (Embedding(mask_zero=True))")
    if not args or any(flat_keras_tensors(a) is None for a in args):
        raise NotImplementedError(f"lockstep does not support calling {type(owner).__name__} on "
                                  f"{type(args[0]).__name__ if args else 'nothing'} yet: only on KerasTensors "
                                  f"(keras.Input and layers' outputs), inside a model being built")
    parameters = inspect.signature(owner.call).parameters
    for name in ("training", "mask"):
        if name in parameters:
            kwargs[name] = None
    if not getattr(owner, "built", True):
        owner.build(_shape_of(args[0]))
        owner.built = True
    outputs = owner.call(*args, **kwargs)
    if flat_keras_tensors(outputs) is None:
        raise TypeError(f"{qualname} returned {type(outputs).__name__}: lockstep builds a subclass's call from the "
                        f"layers it calls on its inputs, so it must return their KerasTensors (one, or a list or "
                        f"dict of them)")
    return outputs


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
        trainable = kwargs.pop("trainable", True)
        for old, new in _DEPRECATED.get(class_name, {}).items():
            if old in kwargs:  # as Keras 3: the old name taken, with its warning
                warnings.warn(f"Argument `{old}` is deprecated. Use `{new}` instead.")
                kwargs[new] = kwargs.pop(old)
        config = {k: v for k, v in {**defaults, **kwargs}.items() if v is not _LAYERS_DEFAULT}
        config.setdefault("name", "")
        if config.get("activation", "") is None:
            config["activation"] = "linear"
        for key in ("kernel_initializer", "bias_initializer", "depthwise_initializer", "recurrent_initializer",
                    "pointwise_initializer", "alpha_initializer"):
            if config.get(key) is not None and not isinstance(config[key], str):
                raise ValueError(f"keras.layers.{class_name}: lockstep takes {key} by name only "
                                 f"(e.g. 'glorot_uniform'), not {config[key]!r}")
        missing = [name for name in positional if name not in config and name not in defaults]
        if config.get("strides", "") is None:  # pooling: strides default to pool_size
            del config["strides"]
        if missing:
            raise TypeError(f"keras.layers.{class_name} missing required argument '{missing[0]}'")
        config = {k: _jsonable(v) for k, v in config.items()}
        native = _lockstep.make_layer(class_name, json.dumps(config))
        native.trainable = bool(trainable)
        return Layer(native, input_shape)

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
    """Keras' symbolic tensor: keras.Input, or a layer's output on one; .shape has None for the batch.
    a + b, a - b and a * b of two (of one shape) are the layers Add, Subtract and Multiply called on
    them, as Keras makes them; with a number (and -a), Rescaling (x * scale + offset)."""

    # NumPy defers to the reflected operators below (2.0 * x) instead of converting the tensor.
    __array_ufunc__ = None

    def __init__(self, tensor):
        self._tensor = tensor
        self.shape = tuple(None if d < 0 else d for d in tensor.shape)
        self.dtype = "float32"

    def _operate(self, symbol, other, reflected=False):
        """self (symbol) other, or other (symbol) self where reflected (other a number: Python tries
        a KerasTensor's own operator first): a merge layer of two KerasTensors, or Rescaling."""
        if isinstance(other, KerasTensor):
            merge = {"+": "Add", "-": "Subtract", "*": "Multiply"}[symbol]
            return Layer(_lockstep.make_layer(merge, json.dumps({"name": ""})))([self, other])
        if not isinstance(other, numbers.Real) or isinstance(other, bool):
            raise TypeError(f"lockstep does not support KerasTensor {symbol} {type(other).__name__} yet: only another "
                            f"KerasTensor of the same shape (a layer's output) or a number")
        c = float(other)
        scale, offset = {"+": (1.0, c), "-": (-1.0, c) if reflected else (1.0, -c), "*": (c, 0.0)}[symbol]
        config = {"name": "", "scale": scale, "offset": offset}
        return Layer(_lockstep.make_layer("Rescaling", json.dumps(config)))(self)

    def __add__(self, other):
        return self._operate("+", other)

    def __sub__(self, other):
        return self._operate("-", other)

    def __mul__(self, other):
        return self._operate("*", other)

    def __radd__(self, other):
        return self._operate("+", other, reflected=True)

    def __rsub__(self, other):
        return self._operate("-", other, reflected=True)

    def __rmul__(self, other):
        return self._operate("*", other, reflected=True)

    def __neg__(self):
        return self._operate("*", -1.0)

    def _unsupported(self, what, instead):
        return TypeError(f"lockstep does not support {what} on a KerasTensor yet: {instead}")

    def __truediv__(self, other):
        raise self._unsupported("/", "multiply by the reciprocal (x * (1 / c)), or use a layer")

    __rtruediv__ = __truediv__

    def __matmul__(self, other):
        raise self._unsupported("@", "use keras.layers.Dense or Dot")

    __rmatmul__ = __matmul__

    def __getitem__(self, key):
        raise self._unsupported("indexing (x[...])", "use a layer (Reshape, Permute, GlobalAveragePooling1D, ...)")

    def _symbolic(self, what):
        return TypeError(f"a KerasTensor has no values while a model is being built, so lockstep cannot {what}: "
                         f"data-dependent Python control flow and tf / keras.ops functions cannot be traced in a "
                         f"layer's or model's call; use keras layers (Dense, Add, Multiply, Softmax, ...) on "
                         f"KerasTensors, and write x + y, x - y, x * y for the merge layers")

    def __bool__(self):
        raise self._symbolic("take its truth value (if / while on a tensor)")

    def __array__(self, dtype=None, copy=None):
        raise self._symbolic("make it a NumPy array")

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
