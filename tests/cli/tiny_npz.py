#!/usr/bin/env python3
"""tiny_npz.py FILE SEED: a .npz of 16 training and 4 test examples of 2x2 uint8 pixels (random
from SEED), labels 0/1, as keras.datasets returns them; written without numpy (the .npy headers
by hand) so that the CLI tests need only python3."""
import random
import struct
import sys
import zipfile

path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)


def npy(descr, shape, data):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join("%d," % d for d in shape))
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + data


def split(n):
    labels = [i % 2 for i in range(n)]
    return bytes(rng.randrange(256) for _ in range(4 * n)), struct.pack("<%dq" % n, *labels)


with zipfile.ZipFile(path, "w") as z:
    x, y = split(16)
    z.writestr("x_train.npy", npy("|u1", (16, 2, 2), x))
    z.writestr("y_train.npy", npy("<i8", (16,), y))
    x, y = split(4)
    z.writestr("x_test.npy", npy("|u1", (4, 2, 2), x))
    z.writestr("y_test.npy", npy("<i8", (4,), y))
