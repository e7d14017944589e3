#!/usr/bin/env python3
"""reference_check.py: loom against PyTorch's reference models (bench/torch_reference.py) on the
same weights, a `loom ckpt export` file (read by export_check.py), for what export_check.py's
float32 loss does not cover.

  bf16 WEIGHTS TOKENS SEQ HEADS FFN_MULT LOSS GRAD_NORM [--llama KV_HEADS MULTIPLE_OF THETA]
    loom's bfloat16 step (its loss and global gradient norm, before the update) against PyTorch's
    mixed precision on CPU: forward and loss under torch.autocast to bfloat16, backward outside
    it, float32 weights and gradients. The two round in different places (loom rounds every
    product's inputs and its activations to bfloat16 and keeps norms, softmax and the loss's sums
    in float32; autocast picks per operator), so they agree to bfloat16's precision, not to the
    bit: both within 2^-8 relative, bfloat16's unit roundoff (a shard placed wrongly by the export,
    or a step computing something else, is off by far more). The float32 loss is printed beside.
  greedy WEIGHTS SEQ HEADS FFN_MULT PROMPT CONTINUATION [--llama ...]
    loom's greedy generation (its key/value cache path) against the reference's full forward:
    byte-level ids, the reference's most likely next token at each position equal to loom's, and
    a margin over the second of at least 1e-3 in the logits at each one, so that agreement is not
    decided by rounding.
"""
import os
import sys
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: nothing here needs it
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from export_check import llama_args, read_tokens, reference_model  # noqa: E402


def rel(a, b):
    return abs(a - b) / abs(b)


def bf16(argv):
    weights, tokens, seq, heads, ffn_mult, loss, norm = argv[:7]
    seq, heads, ffn_mult, loss, norm = int(seq), int(heads), int(ffn_mult), float(loss), float(norm)
    model = reference_model(weights, seq, heads, ffn_mult, llama_args(argv[7:]))
    ids = read_tokens(tokens)
    x, y = ids[:-1].unsqueeze(0), ids[1:].unsqueeze(0)
    with torch.no_grad():
        f32 = model(x, y).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(x, y)
    got.backward()
    got_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())).item()
    got = got.item()
    print(f"loss: autocast {got:.6f}, loom {loss:.6f} (relative {rel(loss, got):.2e}); float32 {f32:.6f} "
          f"(relative {rel(f32, got):.2e})")
    print(f"gradient norm: autocast {got_norm:.6f}, loom {norm:.6f} (relative {rel(norm, got_norm):.2e})")
    assert rel(loss, got) < 2 ** -8, "loom's bfloat16 loss is not autocast's"
    assert rel(norm, got_norm) < 2 ** -8, "loom's bfloat16 gradient norm is not autocast's"


def greedy(argv):
    weights, seq, heads, ffn_mult, prompt, continuation = argv[:6]
    seq, heads, ffn_mult = int(seq), int(heads), int(ffn_mult)
    model = reference_model(weights, seq, heads, ffn_mult, llama_args(argv[6:]))
    ids = list(prompt.encode())
    want = list(continuation.encode())
    assert len(ids) + len(want) <= seq, "prompt and continuation must fit the context (no sliding window here)"
    smallest = float("inf")
    with torch.no_grad():
        for i, token in enumerate(want):
            logits = model.logits(torch.tensor([ids]))[0, -1]
            top = torch.topk(logits, 2)
            margin = (top.values[0] - top.values[1]).item()
            smallest = min(smallest, margin)
            assert top.indices[0].item() == token, (
                f"token {i}: the reference's most likely is {top.indices[0].item()}, loom chose {token}")
            assert margin >= 1e-3, f"token {i}: a near tie (margin {margin:.2e}): the check is not conclusive"
            ids.append(token)
    print(f"greedy: the reference chooses loom's {len(want)} tokens, the smallest margin {smallest:.3f}")


if __name__ == "__main__":
    {"bf16": bf16, "greedy": greedy}[sys.argv[1]](sys.argv[2:])
