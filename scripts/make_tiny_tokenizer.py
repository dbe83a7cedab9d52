#!/usr/bin/env python3
"""Writes tests/data/tiny_tokenizer/{tokenizer.json,tokenizer_config.json}: a tiny byte-level BPE
for tiny test models and server tests.

Vocabulary: the 256 GPT-2 byte characters (ids 0..255), then NUM_MERGES merges learned here on the
small English text below (ids 256..), then the ChatML special tokens <|endoftext|>, <|im_start|>,
<|im_end|>. Deterministic: merges are chosen by (count desc, pair asc); no randomness, standard
library only. Re-run after editing the text: python3 scripts/make_tiny_tokenizer.py
"""
import collections
import json
import os
import re

NUM_MERGES = 120

TEXT = """
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs
into the forest. A model reads the text, then it writes an answer for the user. The user asks
a question and the assistant answers it. Hello, world! How are you today? I am fine, thank you.
There is a small house on the hill; in the house there is a table, and on the table there is a
book. The book tells the story of a king who wanted to learn everything about the world.
Numbers like 1, 2, 3, 10, 42 and 2024 appear in the text as well. We test the tokenizer with
simple sentences, because simple sentences are easy to check by hand. The end of the story is
near: the king learns that the world is large, and that there is always something new to read.
"""

# GPT-2 style pre-tokenization, ASCII classes (enough to pick merges for English).
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main():
    b2u = bytes_to_unicode()
    words = collections.Counter()
    for w in PAT.findall(TEXT):
        words[tuple(b2u[b] for b in w.encode("utf-8"))] += 1
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for _ in range(NUM_MERGES):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        vocab[best[0] + best[1]] = len(vocab)
        new_words = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += n
        words = new_words
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = []
    for s in specials:
        added.append({"id": len(vocab), "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        vocab[s] = len(vocab)
    assert len(vocab) <= 512
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    cfg = {
        "add_bos_token": False, "add_eos_token": False, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "model_max_length": 2048, "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                         "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tiny_tokenizer")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"vocab {len(vocab)} ({len(merges)} merges) -> {out}")


if __name__ == "__main__":
    main()
