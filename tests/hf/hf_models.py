"""Tiny Hugging Face model folders written here, and the published forward passes of their two
architectures written from their definitions, with the Hugging Face conventions: Llama (RMSNorm,
rotary positions rotating the pairs (i, i + hd/2) of each head, kv heads each serving consecutive
query heads, SwiGLU) and GPT-2 (learned positions, LayerNorm, Conv1D weights stored [in, out], one
c_attn of [q | k | v] columns, tanh GELU, head tied to wte). Nothing here comes from loom."""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from safetensors_entries import safetensors_entries  # noqa: E402

NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64", torch.bool: "BOOL"}
TYPES = {v: k for k, v in NAMES.items()}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for key, t in tensors.items():
        raw = bytes(t.contiguous().view(torch.uint8).flatten().tolist())  # no numpy needed
        header[key] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_folder(folder):
    """{name: (dtype name, shape, raw bytes)} of every tensor in a model folder, shards included."""
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for name in files:
        for key, entry, raw in safetensors_entries(os.path.join(folder, name)):
            out[key] = (entry["dtype"], entry["shape"], bytes(raw))
    return out


def tensors_of(folder):
    return {k: torch.frombuffer(bytearray(raw), dtype=TYPES[d]).reshape(shape) if raw else torch.zeros(shape, dtype=TYPES[d])
            for k, (d, shape, raw) in read_folder(folder).items()}


def write_folder(folder, config, tensors, shards=1):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
        return
    keys = list(tensors)
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in keys[s::shards]}
        write_safetensors(os.path.join(folder, name), part)
        weight_map.update({k: name for k in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}, f)


def tiny_llama(dtype, tied, seed=1, vocab=320):
    g = torch.Generator().manual_seed(seed)
    d, heads, kv, layers, inner = 64, 4, 2, 2, 176
    hd = d // heads
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": d,
              "intermediate_size": inner, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 20000.0,
              "hidden_act": "silu", "tie_word_embeddings": tied, "torch_dtype": dtype}
    r = lambda *shape: (torch.randn(*shape, generator=g) * 0.2).to(DTYPES[dtype])  # noqa: E731
    w = {"model.embed_tokens.weight": r(vocab, d), "model.norm.weight": 1 + r(d)}
    if not tied:
        w["lm_head.weight"] = r(vocab, d)
    for i in range(layers):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + r(d), p + "self_attn.q_proj.weight": r(d, d),
                  p + "self_attn.k_proj.weight": r(kv * hd, d), p + "self_attn.v_proj.weight": r(kv * hd, d),
                  p + "self_attn.o_proj.weight": r(d, d), p + "post_attention_layernorm.weight": 1 + r(d),
                  p + "mlp.gate_proj.weight": r(inner, d), p + "mlp.up_proj.weight": r(inner, d),
                  p + "mlp.down_proj.weight": r(d, inner)})
    return config, w


def tiny_gpt2(dtype, seed=2, vocab=320, tied=True, bare=False):
    """bare: GPT2Model's names (no "transformer."), with a head equal to wte stored anyway."""
    g = torch.Generator().manual_seed(seed)
    d, heads, layers, positions = 64, 4, 2, 64
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab, "n_embd": d,
              "n_layer": layers, "n_head": heads, "n_positions": positions, "n_inner": None,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "torch_dtype": dtype,
              "tie_word_embeddings": tied}
    r = lambda *shape: (torch.randn(*shape, generator=g) * 0.2).to(DTYPES[dtype])  # noqa: E731
    w = {"transformer.wte.weight": r(vocab, d), "transformer.wpe.weight": r(positions, d),
         "transformer.ln_f.weight": 1 + r(d), "transformer.ln_f.bias": r(d)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        w.update({p + "ln_1.weight": 1 + r(d), p + "ln_1.bias": r(d), p + "attn.c_attn.weight": r(d, 3 * d),
                  p + "attn.c_attn.bias": r(3 * d), p + "attn.c_proj.weight": r(d, d), p + "attn.c_proj.bias": r(d),
                  p + "ln_2.weight": 1 + r(d), p + "ln_2.bias": r(d), p + "mlp.c_fc.weight": r(d, 4 * d),
                  p + "mlp.c_fc.bias": r(4 * d), p + "mlp.c_proj.weight": r(4 * d, d), p + "mlp.c_proj.bias": r(d)})
    if not tied:
        w["lm_head.weight"] = r(vocab, d)
    if bare:
        w = {k.removeprefix("transformer."): v for k, v in w.items()}
        w["lm_head.weight"] = w["wte.weight"].clone()
        w.update({f"h.{i}.attn.bias": torch.ones(1, 1, positions, positions).tril().bool() for i in range(layers)})
    return config, w


def causal_attention(q, k, v):
    """q [B, H, T, hd], k and v [B, H, T, hd]: softmax(q k^T / sqrt(hd), causal) v."""
    t = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def llama_logits(config, w, ids):
    w = {k: v.double() for k, v in w.items()}
    d, heads = config["hidden_size"], config["num_attention_heads"]
    kv, hd, eps = config.get("num_key_value_heads", heads), d // heads, config["rms_norm_eps"]
    b, t = ids.shape

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    inv_freq = 1.0 / (config.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rotate(x):  # x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    h = w["model.embed_tokens.weight"][ids]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms(h, w[p + "input_layernorm.weight"])
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(b, t, heads, hd).transpose(1, 2)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
        a = causal_attention(rotate(q), rotate(k), v).transpose(1, 2).reshape(b, t, d)
        h = h + a @ w[p + "self_attn.o_proj.weight"].T
        x = rms(h, w[p + "post_attention_layernorm.weight"])
        gate, up = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    h = rms(h, w["model.norm.weight"])
    return h @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


def gpt2_logits(config, w, ids):
    w = {k.removeprefix("transformer."): v.double() for k, v in w.items()}
    d, heads, eps = config["n_embd"], config["n_head"], config["layer_norm_epsilon"]
    hd = d // heads
    b, t = ids.shape

    def ln(x, g, bias):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * g + bias

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))

    def conv1d(x, p):  # Conv1D: x @ W + b, W [in, out]
        return x @ w[p + ".weight"] + w[p + ".bias"]

    h = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(t)]
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        x = ln(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        q, k, v = conv1d(x, p + "attn.c_attn").split(d, -1)
        q, k, v = (y.view(b, t, heads, hd).transpose(1, 2) for y in (q, k, v))
        h = h + conv1d(causal_attention(q, k, v).transpose(1, 2).reshape(b, t, d), p + "attn.c_proj")
        x = ln(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        h = h + conv1d(gelu_new(conv1d(x, p + "mlp.c_fc")), p + "mlp.c_proj")
    h = ln(h, w["ln_f.weight"], w["ln_f.bias"])
    return h @ w.get("lm_head.weight", w["wte.weight"]).T


def logits(folder, ids):
    config = json.load(open(os.path.join(folder, "config.json")))
    w = tensors_of(folder)
    return (llama_logits if config["model_type"] == "llama" else gpt2_logits)(config, w, ids)
