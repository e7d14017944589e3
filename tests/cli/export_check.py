#!/usr/bin/env python3
"""export_check.py WEIGHTS TOKENS SEQ HEADS FFN_MULT LOSS [--llama KV_HEADS MULTIPLE_OF THETA]: loads a
`loom ckpt export` file with a reader of the safetensors layout written here (8-byte header length,
JSON header, raw data), into bench/torch_reference.py's GPT (or, with --llama, its Llama: grouped kv
heads, rotary positions, SwiGLU; a head tied to the token table when the export has no head) of the
same shapes, and checks that its loss on the one sample the token file holds (seq + 1 tokens: every
window is the whole file) is LOSS, loom's loss for those weights, within 1e-5 relative (float32)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from torch_reference import GPT, Llama, swiglu_hidden  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from safetensors_entries import safetensors_entries  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16}


def read_safetensors(path):
    return {key: torch.frombuffer(bytearray(raw), dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
            for key, entry, raw in safetensors_entries(path)}


def loom_to_reference(w, layers):
    """loom's names and shapes -> the reference module's state dict."""
    sd = {"tok.weight": w["embedding.wte"], "pos.weight": w["embedding.wpe"],
          "ln_f.weight": w["final_norm.weight"], "ln_f.bias": w["final_norm.bias"], "head.weight": w["head.weight"]}
    for i in range(layers):
        b, r = f"blocks.{i}.", f"blocks.{i}."
        sd[r + "ln1.weight"], sd[r + "ln1.bias"] = w[b + "attn.norm.weight"], w[b + "attn.norm.bias"]
        sd[r + "qkv.weight"] = w[b + "attn.qkv.weight"].reshape(-1, w[b + "attn.qkv.weight"].shape[-1])
        sd[r + "qkv.bias"] = w[b + "attn.qkv.bias"].reshape(-1)
        sd[r + "proj.weight"], sd[r + "proj.bias"] = w[b + "attn.proj.weight"], w[b + "attn.proj.bias"]
        sd[r + "ln2.weight"], sd[r + "ln2.bias"] = w[b + "mlp.norm.weight"], w[b + "mlp.norm.bias"]
        sd[r + "fc1.weight"], sd[r + "fc1.bias"] = w[b + "mlp.up.weight"], w[b + "mlp.up.bias"]
        sd[r + "fc2.weight"], sd[r + "fc2.bias"] = w[b + "mlp.down.weight"], w[b + "mlp.down.bias"]
    return sd


def loom_to_llama(w, layers):
    """loom's Llama names and shapes -> the reference Llama's state dict: q and [k | v] stacked into
    the reference's one [q | k | v] projection, [gate | up] into its one gate_up."""
    sd = {"tok.weight": w["embedding.wte"], "norm.weight": w["final_norm.weight"]}
    if "head.weight" in w:
        sd["head.weight"] = w["head.weight"]
    for i in range(layers):
        b = f"blocks.{i}."
        kv = w[b + "attn.kv.weight"]
        sd[b + "norm1.weight"] = w[b + "attn.norm.weight"]
        sd[b + "qkv.weight"] = torch.cat([w[b + "attn.q.weight"], kv.reshape(-1, kv.shape[-1])])
        sd[b + "proj.weight"] = w[b + "attn.proj.weight"]
        sd[b + "norm2.weight"] = w[b + "mlp.norm.weight"]
        gate_up = w[b + "mlp.gate_up.weight"]
        sd[b + "gate_up.weight"] = gate_up.reshape(-1, gate_up.shape[-1])
        sd[b + "down.weight"] = w[b + "mlp.down.weight"]
    return sd


def reference_model(weights, seq, heads, ffn_mult, llama=None):
    """The reference GPT, or with llama = (kv_heads, multiple_of, theta) its Llama, holding the
    float32 weights of the export file `weights`."""
    w = read_safetensors(weights)
    assert all(t.dtype == torch.float32 for t in w.values()), "export must be float32"
    vocab, d = w["embedding.wte"].shape
    layers = len({k.split(".")[1] for k in w if k.startswith("blocks.")})
    if llama:
        kv_heads, multiple_of, theta = llama
        model = Llama(vocab, d, layers, heads, kv_heads, seq, swiglu_hidden(d, ffn_mult, multiple_of), theta,
                      tied="head.weight" not in w)
        sd = loom_to_llama(w, layers)
    else:
        model = GPT(vocab, d, layers, heads, seq, ffn_mult)
        sd = loom_to_reference(w, layers)
    missing = set(model.state_dict()) - set(sd)
    assert not missing, f"no loom tensor for {sorted(missing)}"
    model.load_state_dict(sd, strict=True)
    return model


def llama_args(argv):
    """[--llama KV_HEADS MULTIPLE_OF THETA] -> (kv_heads, multiple_of, theta), or None."""
    if argv[:1] != ["--llama"]:
        return None
    return int(argv[1]), int(argv[2]), float(argv[3])


def read_tokens(path):
    return torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.int16).to(torch.long)


def main():
    weights, tokens, seq, heads, ffn_mult, loss = sys.argv[1:7]
    seq, heads, ffn_mult, loss = int(seq), int(heads), int(ffn_mult), float(loss)
    model = reference_model(weights, seq, heads, ffn_mult, llama_args(sys.argv[7:]))
    ids = read_tokens(tokens)
    assert ids.numel() == seq + 1, f"the token file holds {ids.numel()} tokens, not seq + 1 = {seq + 1}"
    with torch.no_grad():
        got = model(ids[:-1].unsqueeze(0), ids[1:].unsqueeze(0)).item()
    rel = abs(got - loss) / abs(loss)
    print(f"reference loss {got:.8f}, loom {loss:.8f}, relative difference {rel:.2e}")
    assert rel < 1e-5, f"the exported weights give loss {got}, loom's was {loss}"


if __name__ == "__main__":
    main()
