#!/usr/bin/env python3
"""Speed reference: lockstep train's transformers (--model vit, --model gpt) in PyTorch and TF/Keras.

--model vit (a Vision Transformer on MNIST): Conv2D(dim, patch, strides=patch) -> Reshape((tokens,
dim)) -> + a learned position embedding (tokens, dim) -> depth pre-norm encoder blocks
(LayerNormalization(1e-6) -> MultiHeadAttention(heads, key_dim=dim/heads) -> Add;
LayerNormalization(1e-6) -> Dense(mlp, gelu) -> Dense(dim) -> Add) -> LayerNormalization(1e-6) ->
GlobalAveragePooling1D -> Dropout(0.1) -> Dense(10, softmax); sparse categorical cross-entropy.
--model gpt (a causal character model on --text): Embedding(vocab, dim) -> + a learned position
embedding (seq, dim) -> depth pre-norm blocks (LayerNormalization -> causal MultiHeadAttention ->
Add; LayerNormalization -> Dense(4 dim, gelu) -> Dense(dim) -> Add) -> LayerNormalization ->
Dense(vocab) logits; cross-entropy from logits at every position (targets: the inputs shifted by
one character). The vocabulary is the text's distinct characters.
Both: Adam(1e-3, eps 1e-7). PyTorch 1.13 has no F.scaled_dot_product_attention:
nn.MultiheadAttention (batch_first) is its attention layer.

    python3 bench/reference_transformer.py [--model vit|gpt] [--framework torch|tf|both] [--threads 1]
        [--steps 200] [--batch 128] [--patch 4] [--dim 64] [--heads 4] [--depth 4] [--mlp 128]
        [--seq 64] [--text FILE] [--warmup-frac 0.05] [--json]
    (gpt's defaults when not given: batch 64, dim 128, depth 2, seq 64)

Same conventions as bench/reference_cnn.py: one child process per framework (TF twice, its default
threads and intra-op = threads / inter-op = 1, keeping the faster), steps/s after the warm-up
fraction, with --json the last stdout line is {"torch": steps_per_second, "tf": steps_per_second}
(null and exit 3 for a framework that could not run).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_cnn  # noqa: E402
import reference_mlp as common  # noqa: E402

FRAMEWORKS = ("torch", "tf")
DEFAULT_TEXT_DIR = "/usr/share/common-licenses"


def read_text(path: str | None) -> str:
    """The file's text, or (None) the files of DEFAULT_TEXT_DIR in name order, each once."""
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read()
    seen, parts = set(), []
    for name in sorted(os.listdir(DEFAULT_TEXT_DIR)):
        real = os.path.realpath(os.path.join(DEFAULT_TEXT_DIR, name))
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        with open(real, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
    return "".join(parts)


def gpt_data(args):
    """(inputs (n, seq) int64, targets (n, seq) int64, vocabulary size): windows of seq + 1 characters."""
    import numpy as np

    text = read_text(args.text)
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))
    n = (len(ids) - 1) // args.seq
    if n < 1:
        raise SystemExit(f"reference_transformer: the text has {len(ids)} characters, fewer than --seq {args.seq} + 1")
    x = np.stack([ids[i * args.seq:(i + 1) * args.seq] for i in range(n)])
    y = np.stack([ids[i * args.seq + 1:(i + 1) * args.seq + 1] for i in range(n)])
    return x, y, len(vocab)


def batches(n: int, batch: int, steps: int, seed: int = 0):
    """Index arrays of `steps` batches, reshuffled every pass."""
    import numpy as np

    rng, order, pos = np.random.default_rng(seed), None, n
    for _ in range(steps):
        if pos + batch > n:
            order, pos = rng.permutation(n), 0
        yield order[pos:pos + batch] if batch <= n else rng.integers(0, n, batch)
        pos += batch


# ---------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------

def torch_model(torch, args, vocab: int):
    nn = torch.nn
    causal = args.model == "gpt"
    eps = 1e-6 if args.model == "vit" else 1e-3  # Keras' LayerNormalization default for gpt
    tokens = (28 // args.patch) ** 2 if args.model == "vit" else args.seq
    mlp = args.mlp if args.model == "vit" else 4 * args.dim

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(args.dim, eps=eps), nn.LayerNorm(args.dim, eps=eps)
            self.attn = nn.MultiheadAttention(args.dim, args.heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(args.dim, mlp), nn.GELU(), nn.Linear(mlp, args.dim))
            self.register_buffer("mask", torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), 1) if causal else None)

        def forward(self, x):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, attn_mask=self.mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            if causal:
                self.embed = nn.Embedding(vocab, args.dim)
            else:
                self.embed = nn.Conv2d(1, args.dim, args.patch, args.patch)
            self.pos = nn.Parameter(torch.randn(1, tokens, args.dim) * 0.02)
            self.blocks = nn.Sequential(*[Block() for _ in range(args.depth)])
            self.ln = nn.LayerNorm(args.dim, eps=eps)
            self.head = (nn.Linear(args.dim, vocab) if causal else
                         nn.Sequential(nn.Dropout(0.1), nn.Linear(args.dim, 10)))

        def forward(self, x):
            x = self.embed(x)
            if not causal:
                x = x.flatten(2).transpose(1, 2)  # (batch, tokens, dim)
            x = self.ln(self.blocks(x + self.pos))
            return self.head(x) if causal else self.head(x.mean(1))

    return Model()


def run_torch(args) -> float:
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    if args.model == "gpt":
        x_np, y_np, vocab = gpt_data(args)
        src = args.text or DEFAULT_TEXT_DIR
    else:
        x_np, y_np, src = common.load_mnist_train()
        x_np, vocab = x_np.reshape(-1, 1, 28, 28), 10
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    model = torch_model(torch, args, vocab)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    times, loss = [], None
    for idx in batches(x.shape[0], args.batch, args.steps):
        i = torch.from_numpy(idx)
        xb, yb = x[i], y[i]
        opt.zero_grad(set_to_none=True)
        out = model(xb)
        loss = loss_fn(out.reshape(-1, vocab), yb.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter())
    sps = common.measure(times, args.warmup_frac)
    common.log(f"{args.model} torch {torch.__version__}: {args.steps} steps of {args.batch}, {args.threads} thread(s), "
               f"data={src}, last loss {float(loss):.4f}, {sps:.2f} steps/s")
    return sps


# ---------------------------------------------------------------------------
# TF / Keras
# ---------------------------------------------------------------------------

def keras_model(keras, args, vocab: int):
    layers = keras.layers
    causal = args.model == "gpt"
    eps = 1e-6 if args.model == "vit" else 1e-3
    tokens = (28 // args.patch) ** 2 if args.model == "vit" else args.seq
    mlp = args.mlp if args.model == "vit" else 4 * args.dim

    class PositionEmbedding(layers.Layer):
        """keras_hub's PositionEmbedding: the learned (tokens, dim) table, broadcast over the batch."""

        def build(self, shape):
            self.table = self.add_weight(shape=(shape[-2], shape[-1]), initializer="glorot_uniform", name="embeddings")

        def call(self, x):
            return keras.ops.broadcast_to(self.table, keras.ops.shape(x))

    if causal:
        inputs = keras.Input(shape=(args.seq,), dtype="int32")
        x = layers.Embedding(vocab, args.dim)(inputs)
    else:
        inputs = keras.Input(shape=(28, 28, 1))
        x = layers.Conv2D(args.dim, args.patch, strides=args.patch, padding="valid")(inputs)
        x = layers.Reshape((tokens, args.dim))(x)
    x = layers.Add()([x, PositionEmbedding()(x)])
    for _ in range(args.depth):
        y = layers.LayerNormalization(epsilon=eps)(x)
        y = layers.MultiHeadAttention(args.heads, key_dim=args.dim // args.heads)(y, y, use_causal_mask=causal)
        x = layers.Add()([x, y])
        y = layers.LayerNormalization(epsilon=eps)(x)
        y = layers.Dense(mlp, activation="gelu")(y)
        x = layers.Add()([x, layers.Dense(args.dim)(y)])
    x = layers.LayerNormalization(epsilon=eps)(x)
    if causal:
        return keras.Model(inputs, layers.Dense(vocab)(x))
    x = layers.Dropout(0.1)(layers.GlobalAveragePooling1D()(x))
    return keras.Model(inputs, layers.Dense(10, activation="softmax")(x))


def run_tf(args) -> float:
    """--tf-threads "tuned": intra-op = threads, inter-op = 1; "default": TF's own choice."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if args.tf_threads == "tuned":
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    keras.utils.set_random_seed(0)
    if args.model == "gpt":
        x, y, vocab = gpt_data(args)
        x, src = x.astype("int32"), args.text or DEFAULT_TEXT_DIR
    else:
        x, y, src = common.load_mnist_train()
        x, vocab = x.reshape(-1, 28, 28, 1), 10
    model = keras_model(keras, args, vocab)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=args.model == "gpt"))
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat()
          .batch(args.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))

    hist, times = common.keras_fit_timed(keras, model, ds, args.steps)
    sps = common.measure(times, args.warmup_frac)
    setting = (f"{args.threads} intra-op / 1 inter-op thread(s)" if args.tf_threads == "tuned" else
               "TF's default threads")
    common.log(f"{args.model} tensorflow {tf.__version__}: {args.steps} steps of {args.batch}, {setting}, "
               f"data={src}, loss {hist.history['loss'][-1]:.4f}, {sps:.2f} steps/s")
    return sps


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

SIZES = ("batch", "patch", "dim", "heads", "depth", "mlp", "seq")


def run_child(framework: str, args) -> float | None:
    py = common.pick_python(framework)
    if py is None:
        common.log(f"{framework}: UNAVAILABLE: module '{common.MODULE[framework]}' not importable")
        return None
    cmd = [py, os.path.abspath(__file__), "--child", framework, "--model", args.model, "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup-frac", str(args.warmup_frac)]
    for k in SIZES:
        cmd += [f"--{k}", str(getattr(args, k))]
    if args.text:
        cmd += ["--text", args.text]
    if framework == "torch":
        return common.run_torch_best_pool(cmd, args.threads)
    return common.run_tf_both_threadings(cmd, args.threads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="PyTorch / TF-Keras speed reference for lockstep's --model vit / gpt.")
    ap.add_argument("--model", choices=("vit", "gpt"), default="vit")
    ap.add_argument("--framework", choices=("torch", "tf", "both"), default="both")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--patch", type=int, default=4)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--depth", type=int)
    ap.add_argument("--mlp", type=int, default=128)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--text", help="gpt: the text file (default: the files of /usr/share/common-licenses)")
    ap.add_argument("--warmup-frac", type=float, default=0.05)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--tf-threads", choices=("tuned", "default"), default="tuned", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    gpt = args.model == "gpt"
    for k, vit_default, gpt_default in (("batch", 128, 64), ("dim", 64, 128), ("depth", 4, 2)):
        if getattr(args, k) is None:
            setattr(args, k, gpt_default if gpt else vit_default)
    if args.steps < 20:
        ap.error("--steps must be at least 20")
    for k in SIZES + ("threads",):
        if getattr(args, k) < 1:
            ap.error(f"--{k} must be positive, got {getattr(args, k)}")
    if args.dim % args.heads:
        ap.error(f"--dim {args.dim} must be a multiple of --heads {args.heads}")
    if not gpt and 28 % args.patch:
        ap.error(f"--patch {args.patch} must divide MNIST's 28 x 28")
    if args.child:
        print(run_torch(args) if args.child == "torch" else run_tf(args))
        return 0
    return reference_cnn.run_and_report(run_child, args)


if __name__ == "__main__":
    sys.exit(main())
