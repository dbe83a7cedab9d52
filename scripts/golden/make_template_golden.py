#!/usr/bin/env python3
"""Renders every chat template × case with transformers' apply_chat_template → expected.jsonl.

Inputs:  tests/golden/templates/<name>.json  {"chat_template", "bos_token", "eos_token", ...}
         tests/golden/templates/cases.json   {"cases": [{"name", "messages", "tools"?, "kwargs"?}]}
Output:  <out>/expected.jsonl, one line per (template, case, add_generation_prompt):
         {"template", "case", "add_generation_prompt", "text"}  or  {..., "error": "<Type>: <msg>"}
         <out>/meta.json with library versions.
The tokenizer object only carries the template and the bos/eos strings (tokenize=False never
touches its vocabulary); any tokenizer.json serves, the Qwen3 one from the npm cache is used.
Run (GPU machine, via scripts/golden/run_on_device.sh):
  python3 scripts/golden/make_template_golden.py --out OUT_DIR
"""
import argparse
import glob
import json
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default=os.path.join(root, "tests", "golden", "templates"))
    ap.add_argument("--tokenizer-json", default=os.path.join(root, ".cache", "tokenizers", "qwen3",
                                                             "tokenizer.json"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import transformers
    import jinja2
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # transformers 5 may only export the new name
        from transformers import TokenizersBackend as PreTrainedTokenizerFast

    os.makedirs(args.out, exist_ok=True)
    cases = json.load(open(os.path.join(args.templates, "cases.json"), encoding="utf-8"))["cases"]
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(args.templates, "*.json"))
                   if "chat_template" in json.load(open(p, encoding="utf-8")))  # skips cases.json, meta.json
    base = PreTrainedTokenizerFast(tokenizer_file=args.tokenizer_json)
    lines = []
    n_err = 0
    for name in names:
        spec = json.load(open(os.path.join(args.templates, name + ".json"), encoding="utf-8"))
        tok = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer,
                                      bos_token=spec.get("bos_token"), eos_token=spec.get("eos_token"))
        tok.chat_template = spec["chat_template"]
        for case in cases:
            for agp in (False, True):
                rec = {"template": name, "case": case["name"], "add_generation_prompt": agp}
                try:
                    text = tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                                   add_generation_prompt=agp, **case.get("kwargs", {}))
                    if not isinstance(text, str):
                        raise TypeError(f"apply_chat_template returned {type(text).__name__}")
                    rec["text"] = text
                except Exception as e:  # a template raising is data, not a crash
                    rec["error"] = f"{type(e).__name__}: {e}"
                    n_err += 1
                lines.append(rec)
        print(f"[templates] {name}: done", flush=True)
    with open(os.path.join(args.out, "expected.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for r in lines:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    meta = {"transformers_version": transformers.__version__, "jinja2_version": jinja2.__version__,
            "python": sys.version.split()[0], "templates": names, "n_records": len(lines), "n_errors": n_err,
            "rendering": "PreTrainedTokenizerFast(bos_token, eos_token).apply_chat_template(messages, tools=tools, "
                         "tokenize=False, add_generation_prompt=agp, **case.kwargs)"}
    json.dump(meta, open(os.path.join(args.out, "meta.json"), "w"), indent=1)
    print(f"[templates] {len(lines)} records, {n_err} errors", flush=True)


if __name__ == "__main__":
    main()
