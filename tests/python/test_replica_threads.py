"""The replica threads keep one Python thread state for the strategy's lifetime: strategies made,
run and deleted one after another, and a program that exits with one alive, end cleanly."""
import gc
import subprocess
import sys
import threading

import numpy as np

import lockstep as tf


def test_strategies_run_python_and_are_deleted_one_after_another():
    for _ in range(5):
        strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
        names = strategy.run(lambda: threading.current_thread().name)
        assert len(set(names.values)) == 2  # replica 1 ran on its own thread
        for _ in range(20):
            result = strategy.run(lambda: tf.constant(np.float32(1.0)) * 2.0)
        assert float(strategy.reduce(tf.distribute.ReduceOp.SUM, result, axis=None)) == 4.0
        del strategy, result
        gc.collect()  # its replica threads end here, each freeing its thread state


def test_a_replica_thread_keeps_its_thread_local_data_between_steps():
    """One thread state per replica thread: threading.local values (which live in it) persist from
    step to step on every replica, as on TensorFlow's replica threads."""
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    local = threading.local()

    def step():
        seen = getattr(local, "steps", 0)
        local.steps = seen + 1
        return seen

    for _ in range(3):
        result = strategy.run(step)
    assert result.values == (2, 2)


def test_a_program_may_exit_with_its_strategy_alive():
    program = ("import numpy as np, lockstep as tf\n"
               "s = tf.distribute.MirroredStrategy(['cpu:0', 'cpu:1'])\n"
               "print(sum(float(v) for v in s.run(lambda: tf.constant(np.float32(1.0))).values))\n")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "2.0", run.stdout + run.stderr
