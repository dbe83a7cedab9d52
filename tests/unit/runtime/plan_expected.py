#!/usr/bin/env python3
"""Hand arithmetic for tests/unit/runtime/plan_test.cpp, written apart from src/runtime/plan.cpp.

Every matrix in bf16 (2 bytes an element) but the MoE router (f32, as every quantization policy
keeps it: `edgeseek convert --type bf16` writes it so), every 1-D tensor f32; KV f16; prompt 64, gen 16
(decode at depth 72: 73 keys), batch 1, context 4096. Prints the constants the test pins.
"""
import json, sys

def cfg_from_json(path):
    c = json.load(open(path))
    g = lambda k, d=0: c.get(k) if c.get(k) is not None else d
    arch = c["architectures"][0]
    h = dict(D=c["hidden_size"], I=c["intermediate_size"], L=c["num_hidden_layers"], H=c["num_attention_heads"],
             KVH=g("num_key_value_heads", c["num_attention_heads"]), V=c["vocab_size"],
             tie=bool(g("tie_word_embeddings", False)), arch=arch)
    h["hd"] = g("head_dim", h["D"] // h["H"])
    h["mla"] = "Deepseek" in arch
    h["bias"] = "Qwen2" in arch or bool(g("attention_bias", False))
    if h["mla"]:
        h.update(ql=g("q_lora_rank"), r=c["kv_lora_rank"], dn=c["qk_nope_head_dim"], dr=c["qk_rope_head_dim"],
                 dv=c["v_head_dim"], MI=c["moe_intermediate_size"], E=c["n_routed_experts"], S=c["n_shared_experts"],
                 K=c["num_experts_per_tok"], FK=c["first_k_dense_replace"], noaux=g("topk_method", "") == "noaux_tc")
        h["bias"] = False
    return h

def plan(h, P=64, G=16, B=1, ctx=4096, kvb=2):
    D, I, L, H, V = h["D"], h["I"], h["L"], h["H"], h["V"]
    mat = 0.0; vec = 0; router_elems = 0; dense_flops = 0; expert_elems = 0; n_exp = 0; K = 0; absorbed = 0; kv_b = 0
    params = V * D * (1 if h["tie"] else 2)
    vec += D  # final norm
    for l in range(L):
        vec += 2 * D  # the two layer norms
        if h["mla"]:
            qk = h["dn"] + h["dr"]
            q = (h["ql"] * D + H * qk * h["ql"]) if h["ql"] else H * qk * D
            if h["ql"]: vec += h["ql"]
            a = q + (h["r"] + h["dr"]) * D + D * H * h["dv"]
            vec += h["r"]
            kvb_e = H * (h["dn"] + h["dv"]) * h["r"]
            kv_b += kvb_e; absorbed += kvb_e
        else:
            qd, kd = H * h["hd"], h["KVH"] * h["hd"]
            a = qd * D + 2 * kd * D + D * qd
            if h["bias"]: vec += qd + 2 * kd
        mat += a; dense_flops += 2 * a
        if h["mla"] and l >= h["FK"]:
            E, MI = h["E"], h["MI"]
            router = E * D
            shared = 3 * D * MI * h["S"]
            mat += shared; router_elems += router; dense_flops += 2 * (router + shared)
            if h["noaux"]: vec += E
            expert_elems += E * 3 * D * MI; n_exp = E; K = h["K"]
        else:
            mat += 3 * D * I; dense_flops += 2 * 3 * D * I
    params += mat + vec + expert_elems + kv_b + router_elems
    stored = 2 * (mat + expert_elems + kv_b) + 4 * (vec + router_elems) + 2 * V * D * (1 if h["tie"] else 2)
    weights = stored + 2 * absorbed
    # KV per token, f16
    kvt = L * ((h["r"] + h["dr"]) if h["mla"] else 2 * h["KVH"] * h["hd"]) * kvb
    depth = P + G // 2
    keys = depth + 1
    n_moe = sum(1 for l in range(L) if h["mla"] and l >= h["FK"])
    per_exp = 3 * D * h["MI"] if n_moe else 0
    # attention flops for one query at `keys` keys, and for P queries from empty (P(P+1)/2 pairs)
    def attn(pairs, queries, absorbed_form=True, new_keys=0):
        if not h["mla"]: return 4 * H * h["hd"] * pairs
        r, dn, dr, dv = h["r"], h["dn"], h["dr"], h["dv"]
        kvbf = 2 * H * r * (dn + dv)
        if absorbed_form: return 2 * H * (2 * r + dr) * pairs + kvbf * queries
        return 2 * H * (dn + dr + dv) * pairs + kvbf * new_keys
    dec_flops = dense_flops + 2 * V * D + L * attn(keys, 1) + n_moe * K * 2 * per_exp
    touched = n_exp * (1 - (1 - K / n_exp) ** 1) if n_moe else 0
    dec_bytes = (2 * mat + 4 * (vec + router_elems) - 4 * D + 2 * absorbed + 2 * V * D + 2 * D + 4 * D
                 + n_moe * touched * 2 * per_exp + keys * kvt + kvt)
    pairs = P * (P + 1) // 2
    pre_attn = 0
    for l in range(L):
        pre_attn += min(attn(pairs, P, True), attn(pairs, P, False, P)) if h["mla"] else attn(pairs, P)
    pre_flops = P * dense_flops + 2 * V * D + pre_attn + n_moe * K * 2 * per_exp * P
    return dict(params=int(params), weights=int(weights), kvt=int(kvt), kv=int(kvt * ctx * B),
                dec_bytes=dec_bytes, dec_flops=dec_flops, pre_flops=pre_flops)

if __name__ == "__main__":
    for p in sys.argv[1:]:
        r = plan(cfg_from_json(p))
        print(p, {k: (int(v) if float(v).is_integer() else v) for k, v in r.items()})

# Real published shapes (src/models/presets.cpp; DeepSeek-V3's config.json for "v3-real").
REAL = {
    "r1-distill-qwen-1.5b": dict(D=1536, I=8960, L=28, H=12, KVH=2, hd=128, V=151936, tie=False, mla=False, bias=True),
    "r1-distill-llama-8b": dict(D=4096, I=14336, L=32, H=32, KVH=8, hd=128, V=128256, tie=False, mla=False, bias=False),
    "deepseek-v2-lite": dict(D=2048, I=10944, L=27, H=16, KVH=16, V=102400, tie=False, mla=True, bias=False, ql=0,
                             r=512, dn=128, dr=64, dv=128, MI=1408, E=64, S=2, K=6, FK=1, noaux=False),
    "v3-real": dict(D=7168, I=18432, L=61, H=128, KVH=128, V=129280, tie=False, mla=True, bias=False, ql=1536,
                    r=512, dn=128, dr=64, dv=128, MI=2048, E=256, S=1, K=8, FK=3, noaux=True),
}
if len(sys.argv) == 1:
    for n, h in REAL.items():
        r = plan(h)
        print(n, {k: (int(v) if float(v).is_integer() else v) for k, v in r.items()})
