"""Ctrl-C during fit: KeyboardInterrupt at a step boundary, and fitting again with the same
BackupAndRestore continues to the same weights, bit for bit, as a run never interrupted."""
import os
import signal
import subprocess
import sys

import numpy as np

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fit_to_interrupt.py")
ENV = {**os.environ, "LOCKSTEP_CPU_DEVICES": "2"}


def run(out_dir):
    return subprocess.run([sys.executable, SCRIPT, str(out_dir)], capture_output=True, text=True, timeout=300,
                          env=ENV)


def epochs_logged(out_dir):
    try:
        with open(out_dir / "log.csv") as f:
            return max(0, len(f.read().splitlines()) - 1)
    except FileNotFoundError:
        return 0


def test_sigint_stops_fit_and_the_backup_resumes_bit_identically(tmp_path):
    whole, interrupted = tmp_path / "whole", tmp_path / "interrupted"
    whole.mkdir()
    interrupted.mkdir()
    finished = run(whole)
    assert finished.returncode == 0, finished.stderr

    proc = subprocess.Popen([sys.executable, SCRIPT, str(interrupted)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    while epochs_logged(interrupted) < 2 and proc.poll() is None:  # training is under way
        try:
            proc.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            pass
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stdout, stdout + stderr
    assert epochs_logged(interrupted) < 20
    assert not (interrupted / "predictions.npy").exists()

    resumed = run(interrupted)
    assert resumed.returncode == 0, resumed.stderr
    np.testing.assert_array_equal(np.load(whole / "predictions.npy"), np.load(interrupted / "predictions.npy"))
