#!/usr/bin/env python3
"""The checks of bench/soak.sh, in the standard library only (no numpy on this machine).

  soak_check.py boundary CHECK SEGMENT MIN  a segment continues the run exactly where it resumed: every
      step of CHECK (a serial run resumed from the same checkpoint, a few steps) that SEGMENT's metrics
      hold has the same loss and grad_norm within 1e-9 relative and lr within 1e-12; at least MIN
      steps are compared
  soak_check.py losses SERIAL FILE...  the soak's metrics FILEs (complete and killed segments) against
      the uninterrupted serial run: together they cover every step of SERIAL, every lr equals (1e-12),
      the mean loss of the last 100 steps is within 1e-2 relative; prints the largest loss and
      grad_norm differences and the first step past 1e-9 (NOTE [Soak checks] says why not a bound)
  soak_check.py checkpoints SOAK SERIAL [TOL]  two checkpoint step directories at the same step with
      the same tensors (names, shapes); prints max |a - b| / max |b| of the float64 weights and AdamW
      moments, assembled from the boxes (the safetensors layout read by hand); fails past TOL if given
  soak_check.py exports A B [TOL]  the same for two `loom ckpt export` files (float32 weights)
Each prints one line per check (`ok: ...`, `FAIL: ...`, or `figure: ...`) and exits 1 on a failure.
"""
import itertools
import json
import os
import struct
import sys
from array import array

FORMATS = {"F64": "d", "F32": "f"}


class TensorFile:
    """A file in the safetensors layout: 8 bytes of header length, the JSON header, the data."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read()
        n = struct.unpack("<Q", self.data[:8])[0]
        self.header = json.loads(self.data[8:8 + n])
        self.base = 8 + n

    def names(self):
        return [k for k in self.header if k != "__metadata__"]

    def tensor(self, key):
        h = self.header[key]
        begin, end = h["data_offsets"]
        values = array(FORMATS[h["dtype"]])
        values.frombytes(self.data[self.base + begin:self.base + end])
        if sys.byteorder != "little":
            values.byteswap()
        return h["shape"], values


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def place(full, shape, offset, size, values):
    """Copies a box (row-major, of `size` at `offset` in the full tensor) into the flat full tensor."""
    if not shape:
        full[0] = values[0]
        return 1
    strides = [numel(shape[i + 1:]) for i in range(len(shape))]
    row = size[-1]
    at = 0
    for index in itertools.product(*(range(o, o + s) for o, s in zip(offset[:-1], size[:-1]))):
        start = sum(i * st for i, st in zip(index, strides)) + offset[-1]
        full[start:start + row] = values[at:at + row]
        at += row
    return at


def load_checkpoint(step_dir):
    """The manifest's step and every tensor, assembled at full shape (name -> (shape, flat array))."""
    manifest = json.load(open(os.path.join(step_dir, "manifest.json")))
    files = {}
    tensors = {}
    for t in manifest["tensors"]:
        shape = t["shape"]
        full = array("d", bytes(8 * numel(shape)))
        placed = 0
        for b in t["boxes"]:
            if b["file"] not in files:
                files[b["file"]] = TensorFile(os.path.join(step_dir, b["file"]))
            got_shape, values = files[b["file"]].tensor(b["key"])
            assert got_shape == b["size"], f"{t['name']}: box {b['key']} is {got_shape}, the manifest says {b['size']}"
            placed += place(full, shape, b["offset"], b["size"], values)
        # Boxes of a piece are written once (NOTE [Atomic checkpoints]'s writer choice): disjoint.
        assert placed == numel(shape), f"{t['name']}: boxes cover {placed} of {numel(shape)} elements"
        tensors[t["name"]] = (shape, full)
    return manifest["step"], tensors


def max_relative(a, b):
    """max |a - b| / max |b| over a tensor (0 when both are all zero)."""
    diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
    scale = max((abs(y) for y in b), default=0.0)
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def compare_tensors(what, got, want, tol):
    """got, want: name -> (shape, values). Prints the worst tensor; True when all are within tol."""
    if sorted(got) != sorted(want):
        print(f"FAIL: {what}: tensor names differ: {sorted(set(got) ^ set(want))[:6]}")
        return False
    worst, worst_name = 0.0, ""
    for name, (shape, values) in want.items():
        if got[name][0] != shape:
            print(f"FAIL: {what}: {name} has shape {got[name][0]}, want {shape}")
            return False
        r = max_relative(got[name][1], values)
        if r >= worst:
            worst, worst_name = r, name
    if tol is None:
        print(f"figure: {what}: {len(want)} tensors, max relative difference {worst:.3g} ({worst_name})")
        return True
    verdict = "ok" if worst <= tol else "FAIL"
    print(f"{verdict}: {what}: {len(want)} tensors, max relative difference {worst:.3g} ({worst_name}), "
          f"tolerance {tol:g}")
    return worst <= tol


def check_checkpoints(soak, serial, tol=None):
    soak_step, got = load_checkpoint(soak)
    serial_step, want = load_checkpoint(serial)
    if soak_step != serial_step:
        print(f"FAIL: checkpoints: the soak's is at step {soak_step}, the serial run's at {serial_step}")
        return False
    if sorted(got) != sorted(want):
        print(f"FAIL: checkpoints: tensor names differ: {sorted(set(got) ^ set(want))[:6]}")
        return False
    ok = True
    for what, moment in (("float64 weights", False), ("float64 AdamW moments", True)):
        names = [n for n in want if (":" in n) == moment]
        ok = compare_tensors(f"{what} at step {soak_step}", {n: got[n] for n in names}, {n: want[n] for n in names},
                             tol) and ok
    return ok


def check_exports(a, b, tol=None):
    fa, fb = TensorFile(a), TensorFile(b)
    got = {n: fa.tensor(n) for n in fa.names()}
    want = {n: fb.tensor(n) for n in fb.names()}
    return compare_tensors("exported float32 weights", got, want, tol)


def load_records(path):
    """A metrics file's records; a last line a kill cut short (no newline, not JSON) is left out."""
    lines = open(path).read().split("\n")
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if line.strip() and i < len(lines) - 1:
                raise
    return records


def relative(got, want):
    return abs(got - want) / abs(want) if want != 0 else abs(got)


def check_boundary(check_path, segment_path, minimum):
    want = {r["step"]: r for r in load_records(check_path)}
    worst, count = {"loss": 0.0, "grad_norm": 0.0, "lr": 0.0}, 0
    for r in load_records(segment_path):
        if r["step"] in want:
            count += 1
            for key in worst:
                worst[key] = max(worst[key], relative(r[key], want[r["step"]][key]))
    ok = worst["loss"] <= 1e-9 and worst["grad_norm"] <= 1e-9 and worst["lr"] <= 1e-12 and count >= minimum
    print(f"{'ok' if ok else 'FAIL'}: boundary: {count} steps (at least {minimum}) of {segment_path} against a serial "
          f"run from the same checkpoint: loss {worst['loss']:.3g}, grad_norm {worst['grad_norm']:.3g} (1e-9), "
          f"lr {worst['lr']:.3g} (1e-12)")
    return ok


def check_losses(serial_path, paths):
    serial = {r["step"]: r for r in load_records(serial_path)}
    covered, count, first_past = set(), 0, None
    worst = {"loss": 0.0, "grad_norm": 0.0, "lr": 0.0}
    last = {}
    for path in paths:
        for r in load_records(path):
            s = r["step"]
            if s not in serial:
                print(f"FAIL: losses: {path} has step {s}, which the serial run did not train")
                return False
            for key in worst:
                d = relative(r[key], serial[s][key])
                worst[key] = max(worst[key], d)
                if key != "lr" and d > 1e-9 and (first_past is None or s < first_past):
                    first_past = s
            covered.add(s)
            last[s] = r["loss"]
            count += 1
    missing = sorted(set(serial) - covered)
    window = sorted(serial)[-100:]
    drift = relative(sum(last.get(s, 0.0) for s in window), sum(serial[s]["loss"] for s in window))
    ok = worst["lr"] <= 1e-12 and not missing and drift <= 1e-2
    print(f"{'ok' if ok else 'FAIL'}: losses: {count} records of {len(paths)} files cover the serial run's "
          f"{len(serial)} steps" + (f" but for {len(missing)}: {missing[:10]}" if missing else "") +
          f"; lr max relative difference {worst['lr']:.3g} (1e-12); mean loss of the last {len(window)} steps "
          f"within {drift:.3g} (1e-2)")
    print(f"figure: losses against the uninterrupted serial run: max relative difference loss {worst['loss']:.3g}, "
          f"grad_norm {worst['grad_norm']:.3g}; first step past 1e-9: {first_past or 'none'}")
    return ok


def main(argv):
    tol = [float(t) for t in argv[3:4]] if argv[:1] in (["checkpoints"], ["exports"]) else []
    if len(argv) >= 3 and argv[0] == "checkpoints":
        ok = check_checkpoints(argv[1], argv[2], *tol)
    elif len(argv) >= 3 and argv[0] == "exports":
        ok = check_exports(argv[1], argv[2], *tol)
    elif len(argv) == 4 and argv[0] == "boundary":
        ok = check_boundary(argv[1], argv[2], int(argv[3]))
    elif len(argv) >= 2 and argv[0] == "losses":
        ok = check_losses(argv[1], argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
