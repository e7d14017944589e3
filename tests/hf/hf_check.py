#!/usr/bin/env python3
"""hf_check.py COMMAND ...: the Hugging Face side of tests/cli/hf.sh.
  make ARCH DTYPE DIR [--tied] [--shards N]  a tiny model folder (ARCH llama or gpt2)
  same A B                                   A's and B's tensors: the same names, types, shapes and bytes
  logits FOLDER LOOM_LOGITS                  the reference forward of FOLDER on the ids in LOOM_LOGITS
                                             (`loom eval --logits`) gives its logits within 1e-5
  loss FOLDER TEXT SEQ WINDOWS LOSS          the reference's mean loss on the first WINDOWS windows of
                                             the text's bytes is LOSS (loom eval's) within 1e-5"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import hf_models  # noqa: E402


def main(args):
    cmd = args[0]
    if cmd == "make":
        arch, dtype, folder = args[1:4]
        tied = "--tied" in args
        shards = next((int(a.split("=")[1]) for a in args if a.startswith("--shards=")), 1)
        if "--shards" in args:
            shards = int(args[args.index("--shards") + 1])
        config, w = hf_models.tiny_llama(dtype, tied) if arch == "llama" else hf_models.tiny_gpt2(dtype)
        hf_models.write_folder(folder, config, w, shards)
    elif cmd == "same":
        a, b = hf_models.read_folder(args[1]), hf_models.read_folder(args[2])
        assert sorted(a) == sorted(b), f"names differ: {sorted(set(a) ^ set(b))}"
        for k in a:
            assert a[k][:2] == b[k][:2], f"{k}: {a[k][:2]} against {b[k][:2]}"
            assert a[k][2] == b[k][2], f"{k}: the bytes differ"
        print(f"ok: {len(a)} tensors the same, byte for byte")
    elif cmd == "logits":
        got = {k: (e["dtype"], e["shape"], bytes(raw)) for k, e, raw in hf_models.safetensors_entries(args[2])}
        ids = torch.frombuffer(bytearray(got["ids"][2]), dtype=torch.int64).reshape(got["ids"][1])
        loom = torch.frombuffer(bytearray(got["logits"][2]), dtype=torch.float32).reshape(got["logits"][1]).double()
        ref = hf_models.logits(args[1], ids)
        err = (loom - ref).abs().max().item() / max(1.0, ref.abs().max().item())
        assert err <= 1e-5, f"logits differ by {err:.3g} (relative to the largest)"
        print(f"ok: {tuple(loom.shape)} logits within {err:.2g} of the reference")
    elif cmd == "loss":
        folder, text, seq, windows, loss = args[1], args[2], int(args[3]), int(args[4]), float(args[5])
        data = torch.tensor(list(open(text, "rb").read()), dtype=torch.int64)
        rows = torch.stack([data[i * seq: i * seq + seq + 1] for i in range(windows)])
        logp = hf_models.logits(folder, rows[:, :-1]).log_softmax(-1)
        ref = -logp.gather(-1, rows[:, 1:, None]).mean().item()
        assert abs(ref - loss) <= 1e-5 * abs(ref), f"loss {loss} against the reference's {ref}"
        print(f"ok: loss {loss:.8f}, the reference's {ref:.8f}")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
