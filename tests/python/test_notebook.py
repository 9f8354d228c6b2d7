"""examples/notebooks/mirrored_mnist.ipynb executes headless (nbclient + ipykernel, the venv's
"lockstep" kernel that scripts/setup_python_pkg.sh registers) and shows what it promises: the
test accuracy, one progress bar per epoch redrawn in place, TensorBoard event files, checkpoints,
the .keras model loaded back with the same predictions, and the custom loop (strategy.run) trained."""
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "notebooks",
                        "mirrored_mnist.ipynb")
KERNEL = "lockstep"  # scripts/setup_python_pkg.sh: ipykernel install --sys-prefix --name lockstep


def stdout_of(cell):
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stdout")


def as_displayed(text):
    """What Jupyter shows: each line as its last carriage return left it."""
    return [line.rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("notebook")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # ipykernel forwards what C++ writes to the process's stdout (fd 1) to the notebook, as in
    # Jupyter, except where it sees pytest's variable: the kernel runs without it.
    # Two replicas whatever the machine's cores (the accuracies below are for a global batch of 128).
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["LOCKSTEP_CPU_DEVICES"] = "2"
    NotebookClient(nb, kernel_name=KERNEL, timeout=600, resources={"metadata": {"path": str(run_dir)}}).execute(env=env)
    return nb, run_dir / "mirrored_mnist_run"


def cell_with(nb, source_fragment):
    cells = [c for c in nb.cells if c.cell_type == "code" and source_fragment in c.source]
    assert len(cells) == 1, source_fragment
    return cells[0]


def test_the_notebook_trains_to_the_tutorials_accuracy(executed):
    nb, _ = executed
    out = stdout_of(cell_with(nb, "model.evaluate(test_dataset"))
    accuracy = float(re.search(r"^test accuracy: ([0-9.]+)$", out, re.M).group(1))
    assert accuracy >= 0.96, out  # 0.973 on 2 replicas
    devices = stdout_of(cell_with(nb, "MirroredStrategy()"))
    assert re.search(r"^Number of devices: 2$", devices, re.M), devices


def test_fit_shows_one_bar_per_epoch_redrawn_in_place(executed):
    nb, _ = executed
    raw = stdout_of(cell_with(nb, "model.fit("))
    epochs = int(re.search(r"^EPOCHS = (\d+)$", cell_with(nb, "model.fit(").source, re.M).group(1))
    shown = as_displayed(raw)
    assert [l for l in shown if l.startswith("Epoch ")] == [f"Epoch {e}/{epochs}" for e in range(1, epochs + 1)], raw
    bars = [l for l in shown if re.match(r"^ *\d+/\d+ \[", l)]
    assert len(bars) == epochs, raw  # one bar per epoch, not a line per step
    assert all(re.search(r"\[=+\] - .* - loss: [0-9.]+ - accuracy: [0-9.]+ .*- val_loss: ", b) for b in bars), raw
    # Drawn with carriage returns (Keras' manner in Jupyter), not as plain lines:
    assert raw.count("\r") >= epochs and "\033" not in raw, raw


def test_tensorboard_logs_checkpoints_and_the_keras_file_are_written(executed):
    nb, run_dir = executed
    for split in ("train", "validation"):
        events = [f for f in os.listdir(run_dir / "logs" / split) if f.startswith("events.out.tfevents.")]
        assert events and all(os.path.getsize(run_dir / "logs" / split / f) > 0 for f in events), split
    assert os.listdir(run_dir / "training_checkpoints")
    assert (run_dir / "mnist_mlp.keras").stat().st_size > 0
    listing = stdout_of(cell_with(nb, "os.walk(out_dir)"))
    assert "events.out.tfevents." in listing, listing


def test_the_saved_model_loads_back_with_the_same_predictions(executed):
    nb, _ = executed
    out = stdout_of(cell_with(nb, "load_model(path)"))
    restored = float(re.search(r"^restored model's test accuracy: ([0-9.]+)$", out, re.M).group(1))
    trained = float(re.search(r"^test accuracy: ([0-9.]+)$", stdout_of(cell_with(nb, "model.evaluate(test_dataset")),
                              re.M).group(1))
    assert restored == trained, out
    assert "same predictions as the trained model: True" in out, out


def test_the_custom_loop_trains_with_strategy_run(executed):
    nb, _ = executed
    cell = cell_with(nb, "LOOP_EPOCHS = ")
    out = stdout_of(cell)
    epochs = int(re.search(r"^LOOP_EPOCHS = (\d+)$", cell.source, re.M).group(1))
    assert re.findall(r"^Epoch (\d+), Loss: [0-9.]+, ", out, re.M) == [str(e) for e in range(1, epochs + 1)], out
    accuracy = float(re.search(r"^custom loop test accuracy: ([0-9.]+)$", out, re.M).group(1))
    assert accuracy >= 0.95, out  # 0.96 after 3 epochs on 2 replicas
