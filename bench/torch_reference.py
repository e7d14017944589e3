#!/usr/bin/env python3
"""PyTorch eager reference of loom's GPT (or Llama), for tokens/s comparisons in the same run.

With RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in the environment (bench/run.py sets them
for each process) it trains with DistributedDataParallel over gloo: the micro-batches of a step
are split over the ranks, gradients synchronise on each rank's last micro-batch only, and rank 0
prints the JSON line.

Same shapes and FLOPs as loom: pre-LayerNorm blocks, fused QKV with bias, GELU(tanh) MLP,
learned token and position embeddings, final LayerNorm, untied bias-free LM head, mean
cross-entropy. AdamW with gradient clipping and gradient accumulation over micro-batches.

--model llama builds a Llama of the same d_model / layers / heads / seq instead: pre-RMSNorm
blocks (eps 1e-5), no biases anywhere, rotary embeddings on q and k (rotate-half pairing
(i, i + hd/2), theta --rope-theta) and no learned positions, optional grouped kv heads
(--kv-heads), a SwiGLU MLP of width multiple_of * ceil(trunc(2/3 * ffn_mult * d_model) /
multiple_of) (--multiple-of), final RMSNorm, and an LM head that is either its own matrix or
the token table (--tie-embeddings).
--dtype bfloat16 is PyTorch's standard mixed precision on CPU: float32 weights, gradients and
AdamW, with forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (matmuls and
linears in bf16, the ops autocast keeps in float32 in float32; bf16 needs no GradScaler);
backward runs outside the autocast region, as the recipe has it.
--attention sdpa (the default) computes causal attention with F.scaled_dot_product_attention, PyTorch
2's fused kernel on CPU; --attention explicit forms the scores. --compile runs the model under
torch.compile (its warm-up steps compile). The JSON line also reports the process's peak resident
memory (max_rss_bytes).
--device cuda runs it on GPU 0 (autocast then to bfloat16 on the GPU; the step is timed until the GPU
has run it) and adds the GPU's name and peak allocated bytes to the line.
Prints exactly one JSON line on stdout. Needs only the standard library and torch.
"""
import argparse
import contextlib
import json
import math
import statistics
import time

import os
import resource

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


SDPA = True  # --attention: PyTorch's fused scaled_dot_product_attention, or the explicit product


class Block(nn.Module):
    def __init__(self, d, heads, hidden, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=True)
        self.proj = nn.Linear(d, d, bias=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden, bias=True)
        self.fc2 = nn.Linear(hidden, d, bias=True)
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        self.masked = ~causal  # a plain attribute: DDP over gloo cannot broadcast bool buffers

    def attn(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            scores = scores.masked_fill(self.masked[:t, :t], float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq, ffn_mult):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, ffn_mult * d, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.apply(self._init)
        for blk in self.blocks:  # residual output projections
            nn.init.normal_(blk.proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))
            nn.init.normal_(blk.fc2.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def logits(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def swiglu_hidden(d, ffn_mult, multiple_of):
    """Llama's MLP width: two thirds of ffn_mult * d (truncated), rounded up to multiple_of."""
    hidden = 2 * ffn_mult * d // 3
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(seq, hd, theta):
    """cos and sin [seq, hd/2] of each (position, pair) angle, computed in float64."""
    inv_freq = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """Rotates each pair (i, i + hd/2) of x [b, h, t, hd] by its position's angle."""
    half = x.shape[-1] // 2
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat((lo * cos - hi * sin, hi * cos + lo * sin), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm1 = RMSNorm(d)
        self.qkv = nn.Linear(d, (heads + 2 * kv_heads) * self.hd, bias=False)  # [q | k | v]
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.gate_up = nn.Linear(d, 2 * hidden, bias=False)  # [gate | up]
        self.down = nn.Linear(hidden, d, bias=False)

    def attn(self, x, cos, sin, masked):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split([d, self.kv_heads * self.hd, self.kv_heads * self.hd], dim=-1)
        q = q.view(b, t, self.heads, self.hd).transpose(1, 2)
        k, v = (z.view(b, t, self.kv_heads, self.hd).transpose(1, 2) for z in (k, v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        groups = self.heads // self.kv_heads  # each kv head serves `groups` consecutive q heads
        k, v = (z.repeat_interleave(groups, dim=1) for z in (k, v))
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
            y = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, cos, sin, masked):
        x = x + self.attn(self.norm1(x), cos, sin, masked)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, vocab, d, layers, heads, kv_heads, seq, hidden, theta, tied):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = None if tied else nn.Linear(d, vocab, bias=False)
        # Plain attributes, not buffers: DDP would broadcast buffers every step (and over gloo
        # cannot broadcast bool ones); forward casts the tables to the activations' dtype.
        self.cos, self.sin = rotary_tables(seq, d // heads, theta)
        self.masked = ~torch.ones(seq, seq, dtype=torch.bool).tril()
        self.apply(GPT._init)
        for blk in self.blocks:  # residual output projections
            nn.init.normal_(blk.proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))
            nn.init.normal_(blk.down.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def logits(self, idx):
        t = idx.shape[1]
        x = self.tok(idx)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin, self.masked[:t, :t])
        x = self.norm(x)
        return x @ self.tok.weight.t() if self.head is None else self.head(x)

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--ffn-mult", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed steps before timing")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--threads", type=int, default=0, help="0 keeps torch's default")
    p.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32",
                   help="bfloat16: float32 weights, forward and loss under CPU autocast to bfloat16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--attention", choices=["sdpa", "explicit"], default="sdpa",
                   help="causal attention by F.scaled_dot_product_attention (fused on CPU in PyTorch 2), "
                        "or as softmax(q k^T / sqrt(hd) + mask) v")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (warm-up steps compile it)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: the model, its batches and AdamW on GPU 0 (autocast to bfloat16 on the GPU)")
    llama = p.add_argument_group("llama", "only with --model llama")
    llama.add_argument("--kv-heads", "--n-kv-heads", dest="kv_heads", type=int, default=None,
                       help="key / value heads, each shared by heads / kv-heads query heads "
                            "(default: --heads)")
    llama.add_argument("--multiple-of", type=int, default=None,
                       help="the SwiGLU width is rounded up to a multiple of this (default: 256)")
    llama.add_argument("--rope-theta", type=float, default=None, help="rotary base (default: 10000)")
    llama.add_argument("--tie-embeddings", action="store_true", help="the token table is also the LM head")
    a = p.parse_args()
    if a.d_model % a.heads:
        p.error("--d-model must be divisible by --heads")
    if a.steps < 1 or a.warmup_steps < 0:
        p.error("--steps must be >= 1 and --warmup-steps >= 0")
    if a.micro_batches % int(os.environ.get("WORLD_SIZE", "1")):
        p.error("--micro-batches must divide over WORLD_SIZE ranks")
    check_llama_args(p, a)
    return a


def check_llama_args(p, a):
    """Refuses Llama options on the GPT path, fills in their defaults and checks their shapes."""
    given = [f for f, v in (("--kv-heads", a.kv_heads), ("--multiple-of", a.multiple_of),
                            ("--rope-theta", a.rope_theta), ("--tie-embeddings", a.tie_embeddings or None))
             if v is not None]
    if a.model != "llama":
        if given:
            p.error(f"{', '.join(given)} only apply to --model llama")
        return
    a.kv_heads = a.heads if a.kv_heads is None else a.kv_heads
    a.multiple_of = 256 if a.multiple_of is None else a.multiple_of
    a.rope_theta = 10000.0 if a.rope_theta is None else a.rope_theta
    if a.kv_heads < 1 or a.heads % a.kv_heads:
        p.error(f"--kv-heads ({a.kv_heads}) must divide --heads ({a.heads})")
    if (a.d_model // a.heads) % 2:
        p.error(f"rotary embeddings need an even head dim; d_model / heads = {a.d_model // a.heads}")
    if a.multiple_of < 1 or not a.rope_theta > 0:
        p.error("--multiple-of must be >= 1 and --rope-theta > 0")


def build_model(a):
    if a.model == "gpt":
        return GPT(a.vocab, a.d_model, a.layers, a.heads, a.seq, a.ffn_mult)
    hidden = swiglu_hidden(a.d_model, a.ffn_mult, a.multiple_of)
    return Llama(a.vocab, a.d_model, a.layers, a.heads, a.kv_heads, a.seq, hidden, a.rope_theta,
                 a.tie_embeddings)


def main():
    a = parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # may only be set once, before any parallel work
    torch.manual_seed(a.seed)
    autocast = a.dtype == "bfloat16"  # mixed precision: the weights stay float32
    dtype = torch.float32 if autocast else getattr(torch, a.dtype)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    global SDPA
    SDPA = a.attention == "sdpa"
    device = torch.device(a.device)
    model = build_model(a).to(dtype).to(device)
    params = [q for q in model.parameters() if q.requires_grad]
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    # One fixed batch per micro-batch slot, generated before timing and reused every step.
    gen = torch.Generator().manual_seed(a.seed)
    data = [torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), generator=gen)
            for _ in range(a.micro_batches)]
    local = a.micro_batches // world
    data = data[rank * local:(rank + 1) * local]
    batches = [(d[:, :-1].contiguous().to(device), d[:, 1:].contiguous().to(device)) for d in data]
    cuda = device.type == "cuda"

    def step():
        total = 0.0
        for i, (inputs, targets) in enumerate(batches):
            last = i + 1 == len(batches)
            sync = model.no_sync() if world > 1 and not last else contextlib.nullcontext()
            with sync:
                # DDP averages gradients over ranks; scale so the result is the global mean.
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    loss = model(inputs, targets) / len(batches)
                loss.backward()
            total += loss.item()  # this rank's share of the step loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()  # the step's kernels have run before its time is taken
        return total

    losses, times = [], []
    for i in range(a.warmup_steps + a.steps):
        t0 = time.perf_counter()
        losses.append(step())
        if i >= a.warmup_steps:
            times.append(time.perf_counter() - t0)

    if world > 1:
        # Every rank's timings end together (DDP synchronises); rank 0 reports the step.
        dist.destroy_process_group()
        if rank != 0:
            return
    median = statistics.median(times)
    extra = {}  # the GPT line stays as it was; a Llama or autocast line says what it ran
    if autocast:
        extra["autocast"] = "bfloat16"
    if a.model == "llama":
        hidden = swiglu_hidden(a.d_model, a.ffn_mult, a.multiple_of)
        extra.update({"model": "llama", "kv_heads": a.kv_heads, "hidden": hidden, "tied": a.tie_embeddings})
    if cuda:
        extra["device"] = torch.cuda.get_device_name(0)
        extra["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
    tokens = a.micro_batch * a.micro_batches * a.seq
    impl = ("pytorch-ddp-gloo" if world > 1 else "pytorch-eager") + ("+compile" if a.compile else "")
    print(json.dumps({
        "impl": impl,
        "attention": a.attention,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "world": world,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "steps": a.steps,
        "step_ms": median * 1e3,
        "step_ms_min": min(times) * 1e3,
        "step_ms_max": max(times) * 1e3,
        "tokens_per_s": tokens / median,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "params": sum(q.numel() for q in model.parameters()),
        **extra,
    }))


if __name__ == "__main__":
    main()
