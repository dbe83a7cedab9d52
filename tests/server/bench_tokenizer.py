#!/usr/bin/env python3
"""Writes a byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json, ChatML template)
whose vocabulary fills a model's whole vocab_size, for load benchmarks of synthetic models.

A synthetic model samples ids over its whole vocabulary; with a small tokenizer (the tiny test
one has 384 ids) almost every sampled id decodes to nothing, and servers stream nothing. Here
every id decodes to 1-3 visible characters, so each generated token reaches the client as text
in edgeseek and in llama.cpp alike (the GGUF made by `edgeseek convert --tokenizer DIR` carries
this vocabulary).

    python3 tests/server/bench_tokenizer.py OUT_DIR [--vocab 151936]
"""
import argparse
import itertools
import json
import os


def bytes_to_unicode():
    # GPT-2's printable stand-ins for the 256 byte values (byte-level BPE).
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), ord('ÿ') + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('out')
    ap.add_argument('--vocab', type=int, default=151936)
    a = ap.parse_args()
    specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    alphabet = [chr(c) for c in range(ord('a'), ord('z') + 1)] + [chr(c) for c in range(ord('A'), ord('Z') + 1)] + \
        [chr(c) for c in range(ord('0'), ord('9') + 1)] + [b2u[ord(' ')]]
    want = a.vocab - len(specials)
    pairs = [x + y for x, y in itertools.product(alphabet, alphabet)]
    for p in pairs:
        if len(vocab) >= want:
            break
        vocab[p] = len(vocab)
        merges.append([p[0], p[1]])
    for p, z in itertools.product(pairs, alphabet):
        if len(vocab) >= want:
            break
        vocab[p + z] = len(vocab)
        merges.append([p, z])
    assert len(vocab) == want, (len(vocab), want)
    added = []
    for s in specials:
        added.append({'id': len(vocab) + len(added), 'content': s, 'single_word': False, 'lstrip': False,
                      'rstrip': False, 'normalized': False, 'special': True})
    byte_level = {'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True}
    tok = {
        'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': added, 'normalizer': None,
        'pre_tokenizer': {'type': 'ByteLevel', **byte_level},
        'post_processor': {'type': 'ByteLevel', **byte_level, 'trim_offsets': False},
        'decoder': {'type': 'ByteLevel', **byte_level},
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': None,
                  'end_of_word_suffix': None, 'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': False,
                  'vocab': vocab, 'merges': merges},
    }
    cfg = {
        'add_bos_token': False, 'add_eos_token': False, 'bos_token': None, 'eos_token': '<|im_end|>',
        'pad_token': '<|endoftext|>', 'unk_token': None, 'model_max_length': 4096,
        'tokenizer_class': 'PreTrainedTokenizerFast',
        'chat_template': "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                         "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, 'tokenizer.json'), 'w') as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(a.out, 'tokenizer_config.json'), 'w') as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(f'{a.out}: {len(vocab) + len(added)} tokens, {len(merges)} merges')


if __name__ == '__main__':
    main()
