#!/usr/bin/env python3
"""hf_check.py COMMAND ...: the Hugging Face side of tests/cli/hf.sh.
  make ARCH DTYPE DIR [--tied | --no-tie] [--bare] [--shards N] [--vocab V]
                                             a tiny model folder (ARCH llama or gpt2; a Llama is untied
                                             unless --tied, a GPT-2 tied unless --no-tie; --bare: a
                                             GPT-2 without "transformer.", its mask buffers, a head copy)
  same A B                                   A's and B's tensors: the same names, types, shapes and bytes
  logits FOLDER LOOM_LOGITS                  the reference forward of FOLDER on the ids in LOOM_LOGITS
                                             (`loom eval --logits`) gives its logits within 1e-5
  loss FOLDER TEXT SEQ WINDOWS LOSS          the reference's mean loss on the first WINDOWS windows of
                                             the text's bytes is LOSS (loom eval's) within 1e-5
  choices FOLDER QUESTIONS SCORES ACCURACY CONTEXT
                                             every choice's log-likelihood (byte tokens, the last CONTEXT + 1
                                             of context and choice) in the reference is `loom eval
                                             --scores`'s within 1e-5, and so is the accuracy
  varied FILE                                a text of many scripts, numbers, spaces and contractions
  bpe-make TEXT PAIR_DIR JSON_DIR MERGES     a byte-level BPE trained on TEXT: vocab.json and merges.txt
                                             in PAIR_DIR, a tokenizer.json (with an added token) in JSON_DIR
  bpe-ids DIR TEXT TOKENS                    the reference's ids of TEXT with DIR's tokenizer are the ids
                                             `loom data prepare` wrote to TOKENS"""
import json
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
        vocab = int(args[args.index("--vocab") + 1]) if "--vocab" in args else 320
        if arch == "llama":
            config, w = hf_models.tiny_llama(dtype, tied, vocab=vocab)
        else:  # GPT-2 ties its head unless told not to
            config, w = hf_models.tiny_gpt2(dtype, vocab=vocab, tied="--no-tie" not in args, bare="--bare" in args)
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
    elif cmd == "choices":
        folder, questions, scores, accuracy, context = args[1], args[2], args[3], float(args[4]), int(args[5])
        right = 0
        assert sum(1 for _ in open(questions)) == sum(1 for _ in open(scores)), "a line per question"
        for line, got in zip(open(questions, encoding="utf-8"), open(scores)):
            q, got = json.loads(line), json.loads(got)
            want = []
            for choice in q["choices"]:
                c = list(choice.encode())
                ids = (list(q["context"].encode()) + c)[-(context + 1):]
                logp = hf_models.logits(folder, torch.tensor([ids[:-1]])).log_softmax(-1)[0]
                want.append(sum(logp[len(ids) - 1 - len(c) + i, t].item() for i, t in enumerate(c)))
            for w, g in zip(want, got["loglik"]):
                assert abs(w - g) <= 1e-5 * max(1.0, abs(w)), f"{q}: log-likelihood {g} against the reference's {w}"
            right += max(range(len(want)), key=want.__getitem__) == q["answer"]
        n = sum(1 for _ in open(questions))
        assert abs(right / n - accuracy) < 1e-12, f"accuracy {accuracy} against the reference's {right / n}"
        print(f"ok: {n} questions' log-likelihoods and accuracy ({accuracy}) as the reference's")
    elif cmd == "varied":
        text = ("Loom's tests don't skip: we'll see.  Twice  spaced,\ttabbed\u00a0and\u3000wide.\n"
                "Numbers 1234567 and 3.14159, ½ and \u2167, \u0663\u0664 in Arabic-Indic; caf\u00e9, stra\u00dfe, "
                "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, "
                "\u0645\u0631\u062d\u0628\u0627 \U0001f642\U0001f680!!\n"
                "  indented line with trailing spaces   \n"
                "symbols: <|endoftext|> #$%&*()[]{} -- \u2014 'quoted' \"double\" I'M YOU'RE it's\n"
                "tokens\u00a0\u00a0between and    four spaces then end ")
        open(args[1], "w", encoding="utf-8").write(text)
    elif cmd == "bpe-make":
        import bpe_reference
        text, pair_dir, json_dir, n = args[1], args[2], args[3], int(args[4])
        vocab, merges = bpe_reference.train(open(text, encoding="utf-8").read(), n)
        os.makedirs(pair_dir, exist_ok=True)
        os.makedirs(json_dir, exist_ok=True)
        json.dump(vocab, open(os.path.join(pair_dir, "vocab.json"), "w"))
        open(os.path.join(pair_dir, "merges.txt"), "w").write("#version: 0.2\n" + "".join(m + "\n" for m in merges))
        added = [{"id": len(vocab), "content": "<|endoftext|>", "special": True}]
        json.dump({"version": "1.0", "added_tokens": added, "normalizer": None,
                   "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
                   "model": {"type": "BPE", "vocab": vocab, "merges": merges}},
                  open(os.path.join(json_dir, "tokenizer.json"), "w"))
    elif cmd == "bpe-ids":
        import bpe_reference
        folder, text, tokens = args[1], open(args[2], encoding="utf-8").read(), args[3]
        added = ()
        if os.path.exists(os.path.join(folder, "tokenizer.json")):
            j = json.load(open(os.path.join(folder, "tokenizer.json")))
            vocab, merges = j["model"]["vocab"], j["model"]["merges"]
            vocab = dict(vocab, **{t["content"]: t["id"] for t in j["added_tokens"]})
            added = tuple(t["content"] for t in j["added_tokens"])
        else:
            vocab = json.load(open(os.path.join(folder, "vocab.json")))
            merges = [m for m in open(os.path.join(folder, "merges.txt")).read().splitlines() if m and not m.startswith("#")]
        want = bpe_reference.encode(text, vocab, merges, added)
        width = {"uint16": 2, "uint32": 4}[json.load(open(tokens + ".json"))["dtype"]]
        raw = open(tokens, "rb").read()
        got = [int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width)]
        assert got == want, f"ids differ from the {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}th on ({len(got)} against {len(want)})"
        print(f"ok: {len(got)} ids equal the reference's ({len(set(got))} distinct)")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
