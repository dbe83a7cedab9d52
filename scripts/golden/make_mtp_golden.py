#!/usr/bin/env python3
"""MTP (multi-token prediction) reference outputs for the dsv3_mtp checkpoint, made with torch.

transformers loads DeepSeek-V3 checkpoints without their MTP layer (model.layers.<n_layers>.*:
reported UNEXPECTED and ignored), so the module is built here by hand from transformers' own
pieces, in float64:
  - the target: the folder loaded as in make_models.py (eager attention, float64); its
    last_hidden_state is the normalized hidden state (DeepseekV3Model applies model.norm last),
    which DeepSeek's modeling code hands the MTP module;
  - the MTP decoder block: transformers' DeepseekV3DecoderLayer with the module's weights, got by
    loading a one-layer copy of the checkpoint whose layer 0 is model.layers.<n_layers>.* (so
    transformers' own weight conversion, fused experts included, applies to it), and that copy's
    rotary embedding (the same rope config);
  - enorm, hnorm, shared_head.norm: DeepseekV3RMSNorm; eh_proj: a bias-free Linear [D, 2D];
    shared_head.head: a Linear [V, D].
Row i (position i, i = 0 .. T-2, T = len(input_ids) of golden.json): e = embed_tokens(t_{i+1})
(the module's own table; zero at position 0, as vLLM's deepseek_mtp masks it), h = target's
hidden state of row i; x = eh_proj(cat(enorm(e), hnorm(h))); x = block(x) causal over rows 0..i;
h' = shared_head.norm(x); logits = shared_head.head(h').
Chain (speculative drafts, k = CHAIN): d_1 = argmax of the last row's logits; row T-2+j (position
T-2+j) takes e = embed(d_j), h = h' of the row before it, and gives d_{j+1} (recomputed from
scratch over all rows each time: the same as a KV cache, without one).

Writes into the model folder (default tests/golden/data/models/dsv3_mtp):
  mtp_logits.f32        float32 [T-1, V]: the catch-up rows' logits
  mtp_chain_logits.f32  float32 [CHAIN, V]: logits of the chain rows (row 0 = mtp_logits[-1])
  mtp_golden.json       chain ids, shapes, margins, versions
Run (GPU machine, where torch and transformers 5.17 are; CPU float64 compute, seconds), from the
repository root, e.g. through the device tool:
  run(command="python3 scripts/golden/make_mtp_golden.py --out $OUT")
then here: cp <files_at>/mtp_golden.json <files_at>/mtp_logits.f32 <files_at>/mtp_chain_logits.f32 \
  tests/golden/data/models/dsv3_mtp/
and MtpGolden.MatchesTheTransformersBuiltModule (es_test_runtime) stops skipping.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import AutoModelForCausalLM
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm

CHAIN = 4


def load(folder):
    kw = dict(dtype=torch.float64, attn_implementation="eager")
    try:
        m = AutoModelForCausalLM.from_pretrained(folder, experts_implementation="eager", **kw)
    except (TypeError, ValueError):
        m = AutoModelForCausalLM.from_pretrained(folder, **kw)
    return m.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tests/golden/data/models/dsv3_mtp")
    ap.add_argument("--out", default=None, help="where to write (default: the model folder)")
    a = ap.parse_args()
    out = a.out or a.model
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    golden = json.load(open(os.path.join(a.model, "golden.json")))
    L, D, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    eps = cfg["rms_norm_eps"]
    assert cfg.get("num_nextn_predict_layers", 0) >= 1, "the checkpoint has no MTP layer"
    ids = golden["input_ids"]
    T = len(ids)
    torch.manual_seed(0)

    # All tensors, in float64 (the stored bf16 values exactly).
    st = {}
    with safe_open(os.path.join(a.model, "model.safetensors"), "pt") as f:
        for k in f.keys():
            st[k] = f.get_tensor(k)
    p = f"model.layers.{L}."
    mtp = {k[len(p):]: v for k, v in st.items() if k.startswith(p)}
    for need in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"):
        assert need in mtp, f"missing {p}{need}"

    # The MTP decoder block through transformers: a one-layer checkpoint whose layer 0 is it.
    tmp = tempfile.mkdtemp(prefix="mtp_block_")
    one = dict(cfg, num_hidden_layers=1, num_nextn_predict_layers=0,
               first_k_dense_replace=0 if L >= cfg.get("first_k_dense_replace", 0) else 1)
    json.dump(one, open(os.path.join(tmp, "config.json"), "w"), indent=1)
    sub = {k: v for k, v in st.items() if not k.startswith("model.layers.")}
    block_keys = [k for k in mtp if k.split(".")[0] in ("self_attn", "mlp", "input_layernorm",
                                                        "post_attention_layernorm")]
    for k in block_keys:
        sub["model.layers.0." + k] = mtp[k]
    save_file({k: v.contiguous() for k, v in sub.items()}, os.path.join(tmp, "model.safetensors"),
              metadata={"format": "pt"})
    blk_model = load(tmp)
    block = blk_model.model.layers[0]
    rotary = blk_model.model.rotary_emb
    sd = blk_model.state_dict()
    worst = 0.0
    for k in block_keys:  # the loaded block is the checkpoint's layer (where names map one to one)
        if "model.layers.0." + k in sd:
            worst = max(worst, float((sd["model.layers.0." + k].double() - mtp[k].double()).abs().max()))

    def norm(w):
        n = DeepseekV3RMSNorm(D, eps=eps).double()
        n.weight.data.copy_(w.double())
        return n

    enorm, hnorm, shared_norm = norm(mtp["enorm.weight"]), norm(mtp["hnorm.weight"]), norm(mtp["shared_head.norm.weight"])
    eh_proj = torch.nn.Linear(2 * D, D, bias=False).double()
    eh_proj.weight.data.copy_(mtp["eh_proj.weight"].double())
    emb = (mtp.get("embed_tokens.weight", st["model.embed_tokens.weight"])).double()
    head_w = (mtp.get("shared_head.head.weight", st.get("lm_head.weight", st["model.embed_tokens.weight"]))).double()

    target = load(a.model)
    with torch.no_grad():
        hid = target.model(input_ids=torch.tensor([ids])).last_hidden_state[0].double()  # [T, D]

    def module(tokens, hs):
        """rows r = 0..n-1 at positions r: (token t, hidden h) -> (h', logits)."""
        n = len(tokens)
        e = emb[torch.tensor(tokens)].clone()
        e[0] = 0.0  # position 0 (vLLM's deepseek_mtp)
        x = eh_proj(torch.cat([enorm(e), hnorm(torch.stack(hs))], dim=-1))[None]
        pos = torch.arange(n)[None]
        cos_sin = rotary(x, pos)
        mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]
        y = block(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
        y = y[0] if isinstance(y, tuple) else y
        hp = shared_norm(y[0])
        return hp, hp @ head_w.T

    with torch.no_grad():
        tokens = ids[1:]                     # t_{i+1} for rows i = 0..T-2
        hs = [hid[i] for i in range(T - 1)]
        hp, logits = module(tokens, hs)
        chain_ids, chain_logits, margins = [], [logits[-1]], []
        for j in range(CHAIN):
            top = torch.topk(chain_logits[-1], 2)
            margins.append(float(top.values[0] - top.values[1]))
            chain_ids.append(int(top.indices[0]))
            if j + 1 == CHAIN:
                break
            tokens = tokens + [chain_ids[-1]]
            hs = hs + [hp[-1]]
            hp, lg = module(tokens, hs)
            chain_logits.append(lg[-1])
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "mtp_logits.f32"))
    torch.stack(chain_logits).to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out, "mtp_chain_logits.f32"))
    meta = {
        "input_ids": ids, "mtp_logits_shape": [T - 1, V], "chain": CHAIN, "chain_ids": chain_ids,
        "chain_logits_shape": [CHAIN, V], "chain_top1_margins": margins,
        "target_hidden": "last_hidden_state (after model.norm)",
        "embedding_at_position_0": "zero", "chain_hidden": "shared_head.norm output of the previous row",
        "block_weights_max_abs_diff_loaded_vs_saved": worst,
        "own_embed_tokens": "embed_tokens.weight" in mtp, "own_head": "shared_head.head.weight" in mtp,
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
    }
    json.dump(meta, open(os.path.join(out, "mtp_golden.json"), "w"), indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(meta))


if __name__ == "__main__":
    sys.exit(main())
