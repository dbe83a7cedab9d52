#!/usr/bin/env python3
"""Expected ids and decodes of the corpus for each real tokenizer, made with the `tokenizers` library.

Inputs:  tests/golden/tokenizer/corpus.jsonl ({"name","text"} or {"name","bytes_b64"} per line)
         <tok-dir>/<tok>/tokenizer.json + tokenizer_config.json (scripts/fetch_test_data.sh)
Output:  <out>/<tok>.jsonl, one line per corpus case, in corpus order:
           {"name", "text", "ids", "ids_special", "tokens", "decoded", "decoded_skip"}
         ids          = Tokenizer.from_file(tokenizer.json).encode(text, add_special_tokens=False).ids
         ids_special  = encode(text, add_special_tokens=True).ids, then bos prepended if
                        tokenizer_config.json has add_bos_token true and ids_special[0] != bos id,
                        and eos appended if add_eos_token true and the last id is not eos
                        (transformers 4.x behaviour; NOT transformers 5 AutoTokenizer)
         tokens       = the token strings of ids
         decoded      = decode(ids, skip_special_tokens=False)
         decoded_skip = decode(ids_special, skip_special_tokens=True)
         For bytes_b64 cases, text = bytes.decode("utf-8", errors="replace").
         <out>/meta.json: versions and the rule above.
"""
import argparse
import base64
import json
import os
import sys


def token_content(x):
    if x is None:
        return None
    return x["content"] if isinstance(x, dict) else x


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-dir", default=os.path.join(root, ".cache", "tokenizers"))
    ap.add_argument("--corpus", default=os.path.join(root, "tests", "golden", "tokenizer", "corpus.jsonl"))
    ap.add_argument("--names", default="deepseek_v3,qwen3,llama3_1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    os.makedirs(args.out, exist_ok=True)
    corpus = [json.loads(l) for l in open(args.corpus, encoding="utf-8") if l.strip()]
    meta = {"tokenizers_version": tokenizers.__version__, "python": sys.version.split()[0],
            "n_cases": len(corpus), "tokenizers": {}}
    for name in args.names.split(","):
        tdir = os.path.join(args.tok_dir, name)
        tok = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
        cfg = json.load(open(os.path.join(tdir, "tokenizer_config.json"), encoding="utf-8"))
        bos = token_content(cfg.get("bos_token"))
        eos = token_content(cfg.get("eos_token"))
        bos_id = tok.token_to_id(bos) if bos else None
        eos_id = tok.token_to_id(eos) if eos else None
        add_bos = bool(cfg.get("add_bos_token", False))
        add_eos = bool(cfg.get("add_eos_token", False))
        out_path = os.path.join(args.out, name + ".jsonl")
        with open(out_path, "w", encoding="utf-8", newline="\n") as f:
            for case in corpus:
                if "text" in case:
                    text = case["text"]
                else:
                    text = base64.b64decode(case["bytes_b64"]).decode("utf-8", errors="replace")
                enc = tok.encode(text, add_special_tokens=False)
                ids = list(enc.ids)
                ids_sp = list(tok.encode(text, add_special_tokens=True).ids)
                if add_bos and bos_id is not None and (not ids_sp or ids_sp[0] != bos_id):
                    ids_sp = [bos_id] + ids_sp
                if add_eos and eos_id is not None and (not ids_sp or ids_sp[-1] != eos_id):
                    ids_sp = ids_sp + [eos_id]
                rec = {"name": case["name"], "text": text, "ids": ids, "ids_special": ids_sp,
                       "tokens": list(enc.tokens),
                       "decoded": tok.decode(ids, skip_special_tokens=False),
                       "decoded_skip": tok.decode(ids_sp, skip_special_tokens=True)}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        meta["tokenizers"][name] = {"bos_token": bos, "bos_id": bos_id, "eos_token": eos, "eos_id": eos_id,
                                    "add_bos_token": add_bos, "add_eos_token": add_eos,
                                    "vocab_size_with_added": tok.get_vocab_size(with_added_tokens=True)}
        print(f"[tokenizer] {name}: {len(corpus)} cases -> {out_path}", flush=True)
    meta["rule"] = ("ids = encode(text, add_special_tokens=False); ids_special = encode(text, add_special_tokens=True) "
                    "then prepend bos if add_bos_token and not already first, append eos if add_eos_token and not "
                    "already last; decoded = decode(ids, skip_special_tokens=False); decoded_skip = "
                    "decode(ids_special, skip_special_tokens=True); invalid UTF-8 → bytes.decode('utf-8', 'replace')")
    json.dump(meta, open(os.path.join(args.out, "meta.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
