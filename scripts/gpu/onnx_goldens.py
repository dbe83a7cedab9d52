#!/usr/bin/env python3
"""ONNX goldens for edgeseek's ONNX import (issue 19): onnxruntime's logits as the reference.

For each tiny golden checkpoint (tests/golden/data/models/<model>/, made by
scripts/golden/make_models.py) and each case this writes OUT/<model>/<case>/:
  model.onnx             the exported / built graph, weights inline (tiny models: ~0.3-1.3 MB)
  genai_config.json      genai cases: eos / bos / context as ORT-GenAI's builder writes them
  logits_prefill.f32     float32 little-endian [T, V]: onnxruntime's logits of one prefill of the
                         model's golden input_ids (golden.json), empty past
  logits_step.f32        float32 [1, V]: onnxruntime's logits of one decode step of next_id (the
                         prefill's argmax) with the prefill's present K/V as past
  reference.json         input_ids, next_id, shapes, tolerance, exporter, versions, and the max
                         abs difference between onnxruntime's prefill logits and transformers'
                         float64 logits.f32 of the checkpoint (a sanity check of the export)
and OUT/manifest.json (every case: ok or the error that stopped it; versions; sizes).

Cases (--cases, comma-separated; default all):
  torchscript        torch.onnx.export(dynamo=False), past KV inputs/outputs, eager attention
  dynamo             torch.onnx.export(dynamo=True), same wrapper
  genai              an ORT-GenAI builder-style graph made with onnx.helper from the checkpoint:
                     GroupQueryAttention (rotary inside, cos/sin caches), SimplifiedLayerNormalization,
                     SkipSimplifiedLayerNormalization, Sigmoid*x SiLU, MatMul
  genai_int4         genai, then onnxruntime's MatMulNBits quantizer (4 bits, block 32, symmetric)
  torchscript_int4   torchscript, then the same quantizer
A case that fails (exporter error, onnxruntime error) is recorded in manifest.json and skipped.
Both exporters first try the plain 2-D attention_mask; if that export fails they retry with a 4-D
additive float mask input ("attention_mask_4d", what transformers uses as given), noted in
reference.json as "mask": "4d".

Run on the GPU machine (torch 2.11, onnx 1.23, onnxruntime 1.30, transformers 5.17; CPU compute,
no network), from the repository root:
  python3 scripts/gpu/onnx_goldens.py --models tests/golden/data/models --out OUT_DIR
  [--only qwen2_tied,llama3_f32] [--cases genai,genai_int4,...] [--max-total-mb 12]
then copy OUT_DIR to tests/golden/data/onnx/ here (tests/golden/onnx_golden_test.cpp reads it).
"""
import argparse
import inspect
import json
import math
import os
import shutil
import sys
import traceback

import numpy as np

DEFAULT_MODELS = ["qwen2_tied", "llama3_f32"]
DEFAULT_CASES = ["torchscript", "dynamo", "genai", "genai_int4", "torchscript_int4"]
OPSET = 17
PAST_DUMMY = 3  # past length of the dummy inputs the exporters trace with
SEQ_DUMMY = 4


# ---- helpers ------------------------------------------------------------------------------------
def versions():
    import onnx
    import onnxruntime
    import torch
    import transformers
    return {"python": sys.version.split()[0], "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "transformers": transformers.__version__,
            "numpy": np.__version__}


def load_golden(model_dir):
    with open(os.path.join(model_dir, "golden.json")) as f:
        golden = json.load(f)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    ref = np.fromfile(os.path.join(model_dir, "logits.f32"), dtype="<f4").reshape(golden["logits_shape"])
    return golden, config, ref


def causal_additive_mask(past, seq, dtype=np.float32):
    """[1, 1, seq, past + seq]: 0 where a query may attend, finfo.min elsewhere."""
    total = past + seq
    m = np.full((seq, total), np.finfo(dtype).min, dtype=dtype)
    for i in range(seq):
        m[i, : past + i + 1] = 0
    return m[None, None]


def cache_layers(cache):
    """(keys, values) per layer of a transformers Cache, across cache API versions."""
    if hasattr(cache, "layers"):
        return [(l.keys, l.values) for l in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return [tuple(x) for x in cache]


# ---- torch exports --------------------------------------------------------------------------------
def make_wrapper(model, n_layers, mask4d):
    """input_ids, attention_mask (2-D ints or 4-D additive floats), position_ids, then past
    key/value per layer -> logits, then present key/value per layer. forward() gets one named
    parameter per past tensor (no *args: torch.export maps dynamic shapes by parameter)."""
    import torch
    from transformers import DynamicCache

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def run(self, input_ids, attention_mask, position_ids, past):
            try:
                cache = DynamicCache(config=model.config)
            except TypeError:  # older cache API
                cache = DynamicCache()
            for i in range(n_layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True, return_dict=True)
            flat = []
            for k, v in cache_layers(out.past_key_values):
                flat += [k, v]
            return (out.logits, *flat)

    params = ", ".join(f"past_{i}" for i in range(2 * n_layers))
    src = (f"def forward(self, input_ids, attention_mask, position_ids, {params}):\n"
           f"    return self.run(input_ids, attention_mask, position_ids, [{params}])\n")
    scope = {}
    exec(src, scope)  # noqa: S102 - a fixed template, no outside input
    Wrapper.forward = scope["forward"]
    return Wrapper().eval()


def io_names(n_layers, mask4d):
    ins = ["input_ids", "attention_mask_4d" if mask4d else "attention_mask", "position_ids"]
    outs = ["logits"]
    for i in range(n_layers):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def dummy_inputs(config, mask4d):
    import torch
    n_layers = config["num_hidden_layers"]
    hkv = config.get("num_key_value_heads", config["num_attention_heads"])
    hd = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    ids = torch.randint(3, config["vocab_size"], (1, SEQ_DUMMY), dtype=torch.int64)
    if mask4d:
        mask = torch.from_numpy(causal_additive_mask(PAST_DUMMY, SEQ_DUMMY))
    else:
        mask = torch.ones((1, PAST_DUMMY + SEQ_DUMMY), dtype=torch.int64)
    pos = torch.arange(PAST_DUMMY, PAST_DUMMY + SEQ_DUMMY, dtype=torch.int64)[None]
    past = []
    for _ in range(n_layers):
        past += [torch.randn(1, hkv, PAST_DUMMY, hd), torch.randn(1, hkv, PAST_DUMMY, hd)]
    return (ids, mask, pos, *past)


def dynamic_axes(n_layers, mask4d):
    ax = {"input_ids": {0: "batch_size", 1: "sequence_length"},
          "position_ids": {0: "batch_size", 1: "sequence_length"},
          "logits": {0: "batch_size", 1: "sequence_length"}}
    if mask4d:
        ax["attention_mask_4d"] = {0: "batch_size", 2: "sequence_length", 3: "total_sequence_length"}
    else:
        ax["attention_mask"] = {0: "batch_size", 1: "total_sequence_length"}
    for i in range(n_layers):
        for kv in ("key", "value"):
            ax[f"past_key_values.{i}.{kv}"] = {0: "batch_size", 2: "past_sequence_length"}
            ax[f"present.{i}.{kv}"] = {0: "batch_size", 2: "total_sequence_length"}
    return ax


def dynamic_shapes(n_layers, mask4d):
    """dynamic_axes' twin for torch.export, keyed by the wrapper's forward() parameters."""
    from torch.export import Dim
    auto = Dim.AUTO
    ds = {"input_ids": {0: auto, 1: auto}, "position_ids": {0: auto, 1: auto},
          "attention_mask": {0: auto, 2: auto, 3: auto} if mask4d else {0: auto, 1: auto}}
    for i in range(2 * n_layers):
        ds[f"past_{i}"] = {0: auto, 2: auto}
    return ds


def export_torch(model_dir, config, path, dynamo):
    """Exports with the 2-D mask, falling back to the 4-D one. Returns the mask kind used."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    n_layers = config["num_hidden_layers"]
    errors = []
    for mask4d in (False, True):
        ins, outs = io_names(n_layers, mask4d)
        args = dummy_inputs(config, mask4d)
        wrapper = make_wrapper(model, n_layers, mask4d)
        try:
            with torch.no_grad():
                if dynamo:
                    # torch.export's dynamic_shapes keyed by forward()'s parameter names (it cannot
                    # convert dynamic_axes for this wrapper); Dim.AUTO lets it infer that the total
                    # length is past + sequence. The exporter's own opset (18 or later).
                    torch.onnx.export(wrapper, args, path, dynamo=True, external_data=False, input_names=ins,
                                      output_names=outs, dynamic_shapes=dynamic_shapes(n_layers, mask4d))
                else:
                    torch.onnx.export(wrapper, args, path, dynamo=False, do_constant_folding=True,
                                      opset_version=OPSET, input_names=ins, output_names=outs,
                                      dynamic_axes=dynamic_axes(n_layers, mask4d))
            inline_external_data(path)
            return "4d" if mask4d else "2d"
        except Exception as e:  # noqa: BLE001 - recorded, then the next form is tried
            errors.append(f"mask {'4d' if mask4d else '2d'}: {type(e).__name__}: {e}")
    raise RuntimeError(" | ".join(errors))


def inline_external_data(path):
    """Some exporter versions write weights beside the file; the goldens keep one file."""
    import onnx
    m = onnx.load(path, load_external_data=True)
    for f in os.listdir(os.path.dirname(path)):
        if f.endswith(".data") or f.endswith(".onnx_data"):
            os.remove(os.path.join(os.path.dirname(path), f))
    onnx.save_model(m, path, save_as_external_data=False)


# ---- ORT-GenAI builder-style graph ---------------------------------------------------------------
def rope_inv_freq(config, golden):
    if "rope_inv_freq" in golden:  # the float32 values transformers uses (make_models.py)
        return np.asarray(golden["rope_inv_freq"], dtype=np.float32)
    rp = config.get("rope_parameters") or {}
    theta = rp.get("rope_theta", config.get("rope_theta", 10000.0))
    hd = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return (1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd))).astype(np.float32)


def build_genai(model_dir, config, golden, out_dir):
    import onnx
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    w = {}
    for f in sorted(os.listdir(model_dir)):
        if f.endswith(".safetensors"):
            w.update(load_file(os.path.join(model_dir, f)))
    w = {k: np.asarray(v, dtype=np.float32) for k, v in w.items()}
    L = config["num_hidden_layers"]
    D = config["hidden_size"]
    H = config["num_attention_heads"]
    Hkv = config.get("num_key_value_heads", H)
    hd = config.get("head_dim") or D // H
    V = config["vocab_size"]
    eps = float(config.get("rms_norm_eps", 1e-6))
    P = int(config.get("max_position_embeddings", 2048))
    tied = bool(config.get("tie_word_embeddings", False))

    inits, nodes = [], []
    counter = [0]

    def init(name, arr, dtype=TensorProto.FLOAT):
        inits.append(helper.make_tensor(name, dtype, arr.shape, arr.flatten().tobytes(), raw=True))
        return name

    def node(op, ins, outs=None, domain=None, **attrs):
        counter[0] += 1
        name = f"/{op}_{counter[0]}"
        outs = outs or [f"{name}/out"]
        n = helper.make_node(op, ins, outs, name=name, **attrs)
        if domain:
            n.domain = domain
        nodes.append(n)
        return outs[0]

    def linear(x, name):
        y = node("MatMul", [x, init(name + ".weight.T", np.ascontiguousarray(w[name + ".weight"].T))])
        if name + ".bias" in w:
            y = node("Add", [y, init(name + ".bias", w[name + ".bias"])])
        return y

    # mask plumbing, as the builder writes it
    rs = node("ReduceSum", ["attention_mask", init("axes1", np.array([1], np.int64), TensorProto.INT64)], keepdims=0)
    seqlens = node("Cast", [node("Sub", [rs, init("one", np.array(1, np.int64), TensorProto.INT64)])], to=TensorProto.INT32)
    total = node("Cast", [node("Gather", [node("Shape", ["attention_mask"]), init("idx1", np.array(1, np.int64), TensorProto.INT64)])],
                 to=TensorProto.INT32)
    inv = rope_inv_freq(config, golden)
    ang = np.arange(P, dtype=np.float32)[:, None] * inv[None, :]
    cos = init("cos_cache", np.cos(ang.astype(np.float64)).astype(np.float32))
    sin = init("sin_cache", np.sin(ang.astype(np.float64)).astype(np.float32))

    x = node("Gather", [init("model.embed_tokens.weight", w["model.embed_tokens.weight"]), "input_ids"])
    residual, pending = x, None
    for l in range(L):
        p = f"model.layers.{l}."
        if l == 0:
            h = node("SimplifiedLayerNormalization", [residual, init(p + "input_layernorm.weight", w[p + "input_layernorm.weight"])],
                     axis=-1, epsilon=eps)
        else:
            h, s = f"h_{l}", f"sum_in_{l}"
            node("SkipSimplifiedLayerNormalization", [pending, residual, init(p + "input_layernorm.weight", w[p + "input_layernorm.weight"])],
                 [h, "", "", s], domain="com.microsoft", epsilon=eps)
            residual = s
        q = linear(h, p + "self_attn.q_proj")
        k = linear(h, p + "self_attn.k_proj")
        v = linear(h, p + "self_attn.v_proj")
        attn = node("GroupQueryAttention",
                    [q, k, v, f"past_key_values.{l}.key", f"past_key_values.{l}.value", seqlens, total, cos, sin],
                    [f"attn_{l}", f"present.{l}.key", f"present.{l}.value"], domain="com.microsoft",
                    num_heads=H, kv_num_heads=Hkv, do_rotary=1, rotary_interleaved=0, scale=float(1.0 / math.sqrt(hd)))
        o = linear(attn, p + "self_attn.o_proj")
        h2, s2 = f"h2_{l}", f"sum_mid_{l}"
        node("SkipSimplifiedLayerNormalization", [o, residual, init(p + "post_attention_layernorm.weight", w[p + "post_attention_layernorm.weight"])],
             [h2, "", "", s2], domain="com.microsoft", epsilon=eps)
        residual = s2
        g = linear(h2, p + "mlp.gate_proj")
        silu = node("Mul", [g, node("Sigmoid", [g])])
        u = linear(h2, p + "mlp.up_proj")
        pending = linear(node("Mul", [silu, u]), p + "mlp.down_proj")
    node("SkipSimplifiedLayerNormalization", [pending, residual, init("model.norm.weight", w["model.norm.weight"])],
         ["h_final", "", "", ""], domain="com.microsoft", epsilon=eps)
    if tied:
        logits = node("MatMul", ["h_final", init("lm_head.weight.T", np.ascontiguousarray(w["model.embed_tokens.weight"].T))])
    else:
        logits = linear("h_final", "lm_head")
    node("Identity", [logits], ["logits"])

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", V])]
    for l in range(L):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{l}.{kv}", TensorProto.FLOAT,
                                                        ["batch_size", Hkv, "past_sequence_length", hd]))
            outputs.append(helper.make_tensor_value_info(f"present.{l}.{kv}", TensorProto.FLOAT,
                                                         ["batch_size", Hkv, "total_sequence_length", hd]))
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
                              producer_name="edgeseek onnx_goldens.py (ORT-GenAI builder style)")
    model.ir_version = 8
    onnx.save_model(model, os.path.join(out_dir, "model.onnx"))
    eos = config.get("eos_token_id")
    genai = {"model": {"bos_token_id": config.get("bos_token_id"), "context_length": P,
                       "eos_token_id": eos, "pad_token_id": config.get("pad_token_id") or 0,
                       "type": config["model_type"], "vocab_size": V,
                       "decoder": {"filename": "model.onnx", "head_size": hd, "hidden_size": D,
                                   "num_attention_heads": H, "num_hidden_layers": L, "num_key_value_heads": Hkv,
                                   "session_options": {"provider_options": []}}},
             "search": {"max_length": P}}
    with open(os.path.join(out_dir, "genai_config.json"), "w") as f:
        json.dump(genai, f, indent=2)


# ---- MatMulNBits int4 ---------------------------------------------------------------------------
def quantize_int4(src, dst):
    """onnxruntime's MatMulNBits quantizer: 4 bits, block 32, symmetric; accuracy_level 0 after
    (onnxruntime's CPU kernel then computes in f32 from the dequantized blocks, the clean
    reference the importer's exact dequantization is compared with)."""
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as mq
    model = onnx.load(src)
    params = inspect.signature(mq.MatMulNBitsQuantizer.__init__).parameters
    kw = {}
    if "block_size" in params:
        kw["block_size"] = 32
    if "is_symmetric" in params:
        kw["is_symmetric"] = True
    if "accuracy_level" in params:
        kw["accuracy_level"] = None
    if "algo_config" in params and hasattr(mq, "DefaultWeightOnlyQuantConfig"):
        ap = inspect.signature(mq.DefaultWeightOnlyQuantConfig.__init__).parameters
        akw = {k: v for k, v in (("block_size", 32), ("is_symmetric", True), ("accuracy_level", None),
                                 ("bits", 4)) if k in ap}
        kw["algo_config"] = mq.DefaultWeightOnlyQuantConfig(**akw)
    q = mq.MatMulNBitsQuantizer(model, **kw)
    q.process()
    out = q.model.model if hasattr(q.model, "model") else q.model
    for n in out.graph.node:
        if n.op_type == "MatMulNBits":
            for a in n.attribute:
                if a.name == "accuracy_level":
                    a.i = 0
    onnx.save_model(out, dst)
    return sum(1 for n in out.graph.node if n.op_type == "MatMulNBits")


# ---- onnxruntime reference -----------------------------------------------------------------------
def run_ort(path, config, input_ids, genai, mask_kind):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    L = config["num_hidden_layers"]
    H = config["num_attention_heads"]
    Hkv = config.get("num_key_value_heads", H)
    hd = config.get("head_dim") or config["hidden_size"] // H

    def feed(ids, past, pos0):
        T = len(ids)
        f = {"input_ids": np.asarray([ids], np.int64)}
        if "attention_mask" in names:
            f["attention_mask"] = np.ones((1, pos0 + T), np.int64)
        if "attention_mask_4d" in names:
            f["attention_mask_4d"] = causal_additive_mask(pos0, T)
        if "position_ids" in names:
            f["position_ids"] = np.arange(pos0, pos0 + T, dtype=np.int64)[None]
        for l in range(L):
            for j, kv in enumerate(("key", "value")):
                f[f"past_key_values.{l}.{kv}"] = past[2 * l + j] if past else np.zeros((1, Hkv, 0, hd), np.float32)
        return f

    out_names = [o.name for o in sess.get_outputs()]
    res = sess.run(None, feed(input_ids, None, 0))
    logits = res[out_names.index("logits")][0]
    present = [res[out_names.index(f"present.{l}.{kv}")] for l in range(L) for kv in ("key", "value")]
    next_id = int(np.argmax(logits[-1]))
    res2 = sess.run(None, feed([next_id], present, len(input_ids)))
    step = res2[out_names.index("logits")][0]
    return logits.astype(np.float32), step.astype(np.float32), next_id


# ---- main -----------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tests/golden/data/models", help="folder of the golden checkpoints")
    ap.add_argument("--out", required=True, help="output folder (copy it to tests/golden/data/onnx/)")
    ap.add_argument("--only", default=",".join(DEFAULT_MODELS), help="checkpoints (comma-separated)")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="cases (comma-separated)")
    ap.add_argument("--max-total-mb", type=float, default=12.0, help="stop adding cases past this total size")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    manifest = {"versions": versions(), "opset": OPSET, "cases": []}
    total = 0
    for model in a.only.split(","):
        model_dir = os.path.join(a.models, model)
        golden, config, ref_logits = load_golden(model_dir)
        ids = [int(i) for i in golden["input_ids"]]
        made = {}  # case -> (path, mask kind)
        for case in a.cases.split(","):
            d = os.path.join(a.out, model, case)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            path = os.path.join(d, "model.onnx")
            entry = {"model": model, "case": case, "dir": os.path.relpath(d, a.out)}
            try:
                mask = "2d"
                if case in ("torchscript", "dynamo"):
                    mask = export_torch(model_dir, config, path, dynamo=case == "dynamo")
                elif case == "genai":
                    build_genai(model_dir, config, golden, d)
                elif case.endswith("_int4"):
                    base = case[: -len("_int4")]
                    if base not in made:
                        raise RuntimeError(f"needs case '{base}' first (list it before {case})")
                    entry["matmulnbits_nodes"] = quantize_int4(made[base][0], path)
                    mask = made[base][1]
                    if base == "genai":
                        shutil.copy(os.path.join(os.path.dirname(made[base][0]), "genai_config.json"), d)
                else:
                    raise RuntimeError(f"unknown case '{case}'")
                logits, step, next_id = run_ort(path, config, ids, case.startswith("genai"), mask)
                logits.astype("<f4").tofile(os.path.join(d, "logits_prefill.f32"))
                step.astype("<f4").tofile(os.path.join(d, "logits_step.f32"))
                diff = float(np.max(np.abs(logits - ref_logits)))
                int4 = case.endswith("_int4")
                ref = {"model": model, "case": case, "input_ids": ids, "next_id": next_id,
                       "logits_prefill_shape": list(logits.shape), "logits_step_shape": list(step.shape),
                       "tolerance": 1e-3 if int4 else 1e-4, "mask": mask,
                       "exporter": {"torchscript": "torch.onnx.export(dynamo=False)",
                                    "dynamo": "torch.onnx.export(dynamo=True)",
                                    "genai": "onnx.helper, ORT-GenAI builder style"}.get(case.replace("_int4", ""), case),
                       "int4": "onnxruntime MatMulNBitsQuantizer, 4 bits, block 32, symmetric, accuracy_level 0" if int4 else None,
                       "ort_vs_transformers_f64_max_abs": diff, "versions": manifest["versions"]}
                with open(os.path.join(d, "reference.json"), "w") as f:
                    json.dump(ref, f, indent=1)
                size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
                entry.update(ok=True, bytes=size, ort_vs_transformers_f64_max_abs=diff, mask=mask)
                made[case] = (path, mask)
                total += size
                print(f"{model}/{case}: ok, {size / 1e6:.2f} MB, |ort - transformers f64| max {diff:.2e}", flush=True)
                if total > a.max_total_mb * 1e6:
                    print(f"total {total / 1e6:.1f} MB passes --max-total-mb {a.max_total_mb}: stopping", flush=True)
                    manifest["cases"].append(entry)
                    break
            except Exception as e:  # noqa: BLE001 - recorded; the other cases still run
                entry.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-4000:])
                shutil.rmtree(d, ignore_errors=True)
                print(f"{model}/{case}: FAILED: {type(e).__name__}: {e}", flush=True)
            manifest["cases"].append(entry)
        if total > a.max_total_mb * 1e6:
            break
    manifest["total_bytes"] = total
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    ok = sum(1 for c in manifest["cases"] if c.get("ok"))
    print(f"{ok}/{len(manifest['cases'])} cases ok, {total / 1e6:.1f} MB in {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
