#!/usr/bin/env python3
"""Checks the layering rules of DESIGN.md that the compiler cannot:

1. Raw tensor memory (`data<T>()`, `raw_data()`, `const_cast<...>`) is touched only by the
   backend, the tensor layer, and the host file readers/writers listed in RAW_ACCESS_ALLOWED.
   Everything else computes through ops, so a new device or dtype is one more backend.
2. Private backend headers (`#include "backend/..."`) are included only by src/backend,
   src/tensor and src/distribute (which builds each replica's compute context).
3. Each layer's CMake target (src/CMakeLists.txt, `lockstep_layer(name DEPS ... PRIVATE_DEPS ...)`)
   lists exactly the lockstep layers its sources and public headers include.

Usage: scripts/check_layering.py [ROOT]   (ROOT: the repository, default: this script's parent)
Prints one line per violation, `path:line: rule: what`, and exits 1 if there is any.
"""
import pathlib
import re
import sys

# Host file readers/writers (and the cross-worker transport): they move bytes between files (or
# other processes) and host tensors.
RAW_ACCESS_ALLOWED = {
    "src/data/idx.cpp", "src/data/npy.cpp", "src/data/npz.cpp", "src/data/csv.cpp",
    "src/data/cache.cpp", "src/data/fingerprint.cpp", "src/io/safetensors.cpp", "src/io/hdf5_file.cpp", "src/io/hdf5_read.cpp",
    "src/distribute/multi_worker_group.cpp",  # sends host tensors' bytes to other workers, no staging copy
    "include/lockstep/tensor/tensor.hpp",  # declares them
    "src/distribute/nccl/nccl_group.cpp",  # NCCL reads and writes the members' device memory itself
}
RAW_ACCESS_DIRS = ("src/backend/", "src/tensor/")
PRIVATE_BACKEND_ALLOWED = ("src/backend/", "src/tensor/", "src/distribute/")
SCANNED = ("src", "include", "tools", "examples")

RAW = re.compile(r"(\.|->)data<|\braw_data\(|\bconst_cast<")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# Public include folder (include/lockstep/<dir>) -> layer.
PUBLIC_LAYER = {"core": "core", "tensor": "tensor", "autograd": "autograd", "layers": "nn", "losses": "nn",
                "metrics": "nn", "optimizers": "nn", "data": "data", "datasets": "data",
                "distribute": "distribute", "io": "io", "training": "training"}
LAYERS = ["core", "backend", "tensor", "autograd", "nn", "data", "distribute", "io", "training"]


def code_lines(path):
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.lstrip().startswith("//"):
            yield number, line


def included_layer(target):
    parts = target.split("/")
    if parts[0] == "lockstep" and len(parts) > 2:
        return PUBLIC_LAYER.get(parts[1])
    if parts[0] in LAYERS and len(parts) > 1:  # private headers: "backend/...", "tensor/...", "data/..."
        return parts[0]
    return None


def layer_files(root, layer):
    files = list((root / "src" / layer).rglob("*.[ch]pp"))
    for folder, owner in PUBLIC_LAYER.items():
        if owner == layer:
            files += list((root / "include" / "lockstep" / folder).glob("*.hpp"))
    return files


def declared_deps(root):
    text = (root / "src" / "CMakeLists.txt").read_text()
    # Only the calls themselves, not the function definition.
    deps = {}
    for match in re.finditer(r"^lockstep_layer\((\w+)([^)]*)\)", text, re.M):
        deps[match.group(1)] = set(re.findall(r"lockstep_(\w+)", match.group(2)))
    return deps


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.[ch]pp")):
            rel = path.relative_to(root).as_posix()
            raw_ok = rel in RAW_ACCESS_ALLOWED or rel.startswith(RAW_ACCESS_DIRS)
            private_ok = rel.startswith(PRIVATE_BACKEND_ALLOWED)
            for number, line in code_lines(path):
                if not raw_ok and RAW.search(line):
                    problems.append(f"{rel}:{number}: raw-access: touches tensor memory outside src/tensor, "
                                    f"src/backend and the file readers; compute through ops: {line.strip()}")
                m = INCLUDE.match(line)
                if m and m.group(1).startswith("backend/") and not private_ok:
                    problems.append(f"{rel}:{number}: private-header: includes the backend's private "
                                    f"{m.group(1)}; use lockstep/tensor/compute_context.hpp or ops")
    deps = declared_deps(root)
    for layer in LAYERS:
        if layer not in deps:
            problems.append(f"src/CMakeLists.txt: cmake-deps: no lockstep_layer({layer} ...)")
            continue
        used = set()
        for path in layer_files(root, layer):
            for _, line in code_lines(path):
                m = INCLUDE.match(line)
                dep = included_layer(m.group(1)) if m else None
                if dep and dep != layer:
                    used.add(dep)
        missing, unused = used - deps[layer], deps[layer] - used
        if missing:
            problems.append(f"src/CMakeLists.txt: cmake-deps: layer '{layer}' includes "
                            f"{', '.join(sorted(missing))} but its target does not list them")
        if unused:
            problems.append(f"src/CMakeLists.txt: cmake-deps: layer '{layer}' lists "
                            f"{', '.join(sorted(unused))} but includes nothing from them")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layering: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    print("check_layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
