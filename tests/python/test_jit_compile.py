"""compile(jit_compile=...): Keras 3's values reach the model; a bad one and True where the device
cannot capture are ValueErrors naming them; "auto" on the CPU trains eagerly and says why."""
import pytest

import lockstep as tf
from conftest import mlp


def compiled(jit_compile):
    model = mlp(tf)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=jit_compile)
    return model


def test_jit_compile_reaches_the_model(mnist_small):
    (x, y), _ = mnist_small
    for given, kept in (("auto", "auto"), (True, "on"), (False, "off")):
        assert compiled(given)._model.jit_compile == kept
    with pytest.raises(ValueError, match=r"jit_compile must be \"auto\", true or false .*'xla'"):
        compiled("xla")
    model = compiled(True)
    with pytest.raises(ValueError, match="jit_compile=True: train steps on cpu:0 cannot be captured"):
        model.fit(x[:64], y[:64], epochs=1, verbose=0)
    model = compiled("auto")
    model.fit(x[:64], y[:64], epochs=1, verbose=0)
    assert "the CPU runs each kernel on the host" in model._model.jit_compile_reason
