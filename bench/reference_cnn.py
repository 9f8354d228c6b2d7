#!/usr/bin/env python3
"""Speed reference: lockstep train's convnets (--model cnn, --model resnet20) in PyTorch and TF/Keras.

--model cnn (Keras' "simple MNIST convnet"): Input (28, 28, 1) -> Conv2D(32, 3, relu) ->
MaxPooling2D(2) -> Conv2D(64, 3, relu) -> MaxPooling2D(2) -> Flatten -> Dropout(0.5) ->
Dense(10, softmax).
--model resnet20 (lockstep's applications::ResNet20, Keras' ResNet v1 example): Conv(16, 3)-BN-ReLU,
three stages of three residual blocks (16, 32, 64 filters; each Conv-BN-ReLU-Conv-BN plus the
shortcut, a 1x1 Conv-BN where the block strides by 2; Add; ReLU), global average pooling,
Dense(10, softmax); convolutions "same" without bias, BatchNormalization with Keras' momentum 0.99
and epsilon 1e-3.
Both: Adam(1e-3, eps 1e-7), sparse categorical cross-entropy, batch 128 (--batch), MNIST scaled
to [0, 1].

    python3 bench/reference_cnn.py [--model cnn|resnet20] [--framework torch|tf|both] [--threads 1]
                                   [--steps 300] [--batch 128] [--warmup-frac 0.05] [--json]

Same conventions as bench/reference_mlp.py (whose data loading, timing and interpreter choice it
uses): one child process per framework, steps/s after the warm-up fraction, with --json the last
stdout line is {"torch": steps_per_second, "tf": steps_per_second} (null and exit 3 for a
framework that could not run). PyTorch runs NCHW (its native layout), TF NHWC.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_mlp as common  # noqa: E402

FRAMEWORKS = ("torch", "tf")


def torch_resnet20(torch):
    nn = torch.nn

    def conv_bn(cin, cout, k, stride):
        # Keras "same" with stride 2 on an even size pads (0, 1); torch pads symmetrically: the
        # same cost, which is what this reference measures.
        return [nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False),
                nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)]

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(), *conv_bn(cout, cout, 3, 1))
            self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 else nn.Identity()

        def forward(self, x):
            return torch.relu(self.shortcut(x) + self.body(x))

    layers, cin = [*conv_bn(1, 16, 3, 1), nn.ReLU()], 16
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            layers.append(Block(cin, filters, 2 if stage > 0 and block == 0 else 1))
            cin = filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def keras_resnet20(keras):
    layers = keras.layers

    def conv_bn(x, filters, k, stride):
        x = layers.Conv2D(filters, k, strides=stride, padding="same", use_bias=False,
                          kernel_initializer="he_normal")(x)
        return layers.BatchNormalization()(x)

    inputs = keras.Input(shape=(28, 28, 1))
    x = layers.Activation("relu")(conv_bn(inputs, 16, 3, 1))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage > 0 and block == 0 else 1
            y = conv_bn(layers.Activation("relu")(conv_bn(x, filters, 3, stride)), filters, 3, 1)
            shortcut = x if stride == 1 else conv_bn(x, filters, 1, stride)
            x = layers.Activation("relu")(layers.add([shortcut, y]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(10, activation="softmax", kernel_initializer="he_normal")(x))


def run_torch(steps: int, threads: int, warmup_frac: float, batch: int, model_name: str = "cnn") -> float:
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    x_np, y_np, src = common.load_mnist_train()
    x = torch.from_numpy(x_np).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(y_np)
    nn = torch.nn
    if model_name == "resnet20":
        model = torch_resnet20(torch)
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.5), nn.Linear(1600, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    n = x.shape[0]
    perm = torch.randperm(n)
    xs, ys = x[perm].contiguous(), y[perm].contiguous()
    pos, times, loss = 0, [], None
    for _ in range(steps):
        if pos + batch > n:
            perm = torch.randperm(n)
            xs, ys = x[perm].contiguous(), y[perm].contiguous()
            pos = 0
        xb, yb = xs[pos:pos + batch], ys[pos:pos + batch]
        pos += batch
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        times.append(time.perf_counter())
    sps = common.measure(times, warmup_frac)
    common.log(f"{model_name} torch {torch.__version__}: {steps} steps of {batch}, {threads} thread(s), data={src}, "
               f"last loss {float(loss):.4f}, {sps:.2f} steps/s")
    return sps


def run_tf(steps: int, threads: int, warmup_frac: float, batch: int, tf_threads: str = "tuned",
           model_name: str = "cnn") -> float:
    """tf_threads "tuned": intra-op = threads, inter-op = 1; "default": TF's own choice."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if tf_threads == "tuned":
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    keras.utils.set_random_seed(0)
    x, y, src = common.load_mnist_train()
    x = x.reshape(-1, 28, 28, 1)
    layers = keras.layers
    if model_name == "resnet20":
        model = keras_resnet20(keras)
    else:
        model = keras.Sequential([
            keras.Input(shape=(28, 28, 1)), layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2), layers.Flatten(), layers.Dropout(0.5),
            layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"])
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=0)
          .batch(batch, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE))

    hist, times = common.keras_fit_timed(keras, model, ds, steps)
    sps = common.measure(times, warmup_frac)
    setting = (f"{threads} intra-op / 1 inter-op thread(s)" if tf_threads == "tuned" else
               f"TF's default threads (intra-op {tf.config.threading.get_intra_op_parallelism_threads() or 'auto'}, "
               f"inter-op {tf.config.threading.get_inter_op_parallelism_threads() or 'auto'})")
    common.log(f"{model_name} tensorflow {tf.__version__}: {steps} steps of {batch}, {setting}, "
               f"data={src}, loss {hist.history['loss'][-1]:.4f}, {sps:.2f} steps/s")
    return sps


def run_child(framework: str, args) -> float | None:
    py = common.pick_python(framework)
    if py is None:
        common.log(f"{framework}: UNAVAILABLE: module '{common.MODULE[framework]}' not importable")
        return None
    cmd = [py, os.path.abspath(__file__), "--child", framework, "--threads", str(args.threads), "--steps",
           str(args.steps), "--batch", str(args.batch), "--warmup-frac", str(args.warmup_frac), "--model", args.model]
    if framework == "torch":
        return common.run_torch_best_pool(cmd, args.threads)
    return common.run_tf_both_threadings(cmd, args.threads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="PyTorch / TF-Keras speed reference for lockstep's --model cnn / resnet20.")
    ap.add_argument("--model", choices=("cnn", "resnet20"), default="cnn")
    ap.add_argument("--framework", choices=("torch", "tf", "both"), default="both")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup-frac", type=float, default=0.05)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--tf-threads", choices=("tuned", "default"), default="tuned", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 20:
        ap.error("--steps must be at least 20")
    if args.child:
        if args.child == "torch":
            print(run_torch(args.steps, max(1, args.threads), args.warmup_frac, args.batch, args.model))
        else:
            print(run_tf(args.steps, max(1, args.threads), args.warmup_frac, args.batch, args.tf_threads, args.model))
        return 0
    return run_and_report(run_child, args)


def run_and_report(run_child, args) -> int:
    """Measures --framework (run_child(framework, args) each) and prints the steps/s: with --json
    one line {"torch": .., "tf": ..}; 3 when a framework could not run."""
    wanted = FRAMEWORKS if args.framework == "both" else (args.framework,)
    results = {fw: run_child(fw, args) for fw in wanted}
    if args.json:
        print(json.dumps(results))
    else:
        for fw, sps in results.items():
            print(f"{fw:6s} {'unavailable' if sps is None else f'{sps:.2f} steps/s'}  (batch {args.batch})")
    return 0 if all(v is not None for v in results.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
