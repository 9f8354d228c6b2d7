"""Reads lockstep's event files with TensorBoard's EventAccumulator and its checkpoint with
safetensors.numpy, and compares them with what io_reference_driver wrote. Exits 77 (ctest's
SKIP_RETURN_CODE) when tensorboard or safetensors is not installed (scripts/setup_python_io.sh)."""
import sys

try:
    import numpy as np
    from safetensors.numpy import load_file
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}; run scripts/setup_python_io.sh", file=sys.stderr)
    sys.exit(77)

out = sys.argv[1]
acc = EventAccumulator(f"{out}/logs/train", size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
assert "epoch_loss" in tags["scalars"], tags
loss = acc.Scalars("epoch_loss")
assert [e.step for e in loss] == [0, 1, 2], loss
np.testing.assert_allclose([e.value for e in loss], [1.0, 0.5, 1.0 / 3], rtol=1e-6)
assert "dense/kernel_0" in tags["histograms"], tags
h = acc.Histograms("dense/kernel_0")[0]
assert h.step == 2 and h.histogram_value.num == 100, h
assert abs(h.histogram_value.min + 5.0) < 1e-6 and abs(h.histogram_value.max - 4.9) < 1e-6, h
assert sum(h.histogram_value.bucket) == 100
assert "model_summary" in tags["tensors"], tags
text = acc.Tensors("model_summary")[0].tensor_proto.string_val[0]
assert text == b"hello", text

ck = load_file(f"{out}/ckpt.safetensors")
assert set(ck) == {"dense/kernel", "dense/bias", "optimizer/dense/kernel/m", "optimizer/dense/kernel/v",
                   "optimizer/dense/bias/m", "optimizer/dense/bias/v"}, sorted(ck)
np.testing.assert_array_equal(ck["dense/kernel"], np.load(f"{out}/dense_kernel.npy"))
np.testing.assert_array_equal(ck["dense/bias"], np.load(f"{out}/dense_bias.npy"))
np.testing.assert_array_equal(ck["optimizer/dense/kernel/m"], np.load(f"{out}/adam_m_kernel.npy"))
assert ck["dense/kernel"].dtype == np.float32 and ck["dense/kernel"].shape == (2, 3)
print("io reference: event file and checkpoint read back by tensorboard and safetensors")
