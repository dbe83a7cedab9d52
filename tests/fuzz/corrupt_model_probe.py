#!/usr/bin/env python3
"""Issue 23's corrupted-model probe: mutates a tiny Hugging Face folder (config.json +
model.safetensors) and a GGUF made from it, ~200 variants, and runs `edgeseek inspect`, a
2-token `generate` and `logits` on each under a timeout. Every variant must either load and
compute finite logits, or fail with one clear `edgeseek: error:` line. Counted:

  crash    killed by a signal (or an exit code >= 128)
  hang     past --timeout seconds
  garbage  exit 0 with non-finite logits (NaN/inf), or an error that is not one clear line
  error    a clean one-line error (expected for most variants)
  ok       loads and computes finite logits (harmless mutations)

    python3 tests/fuzz/corrupt_model_probe.py build/edgeseek [--variants 200] [--seed 23]
        [--keep DIR]   (leave the failing variants there)

Mutations are seeded and printed per failure, so a case can be replayed and added to
tests/fuzz/corpus/ and to a unit test.
"""
import argparse, json, math, os, random, shutil, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, '../golden/data/models/qwen2_tied')

# ---- mutations ---------------------------------------------------------------------------
# Each takes (rng, folder) and edits the folder in place; returns a one-line description.

HOSTILE_NUMBERS = [0, -1, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**32, 2**40, 10**7, -(2**31), 1e30, -1e30,
                   1e-30, 0.5, 1e308]
HOSTILE_VALUES = HOSTILE_NUMBERS + [None, True, '', 'x', [], {}, [1, 2], 'NaN']


def st_split(path):
    d = open(path, 'rb').read()
    n = struct.unpack('<Q', d[:8])[0]
    return json.loads(d[8:8 + n]), d[8 + n:]


def st_join(path, header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + data)


def mut_config_field(rng, d):
    p = os.path.join(d, 'config.json')
    j = json.load(open(p))
    keys = [k for k in j if not isinstance(j[k], (dict, list))] + ['rope_parameters.rope_theta']
    k = rng.choice(keys)
    v = rng.choice(HOSTILE_VALUES)
    if k == 'rope_parameters.rope_theta':
        j['rope_parameters']['rope_theta'] = v
    else:
        j[k] = v
    text = json.dumps(j).replace('"NaN"', 'NaN') if v == 'NaN' else json.dumps(j)
    open(p, 'w').write(text)
    return f'config.json {k} = {v!r}'


def mut_config_bytes(rng, d):
    p = os.path.join(d, 'config.json')
    b = bytearray(open(p, 'rb').read())
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    open(p, 'wb').write(bytes(b))
    return 'config.json random bytes'


def mut_st_header_field(rng, d):
    p = os.path.join(d, 'model.safetensors')
    h, data = st_split(p)
    name = rng.choice([k for k in h if k != '__metadata__'])
    t = h[name]
    what = rng.choice(['dtype', 'shape', 'shape_dim', 'offsets', 'offsets_swap', 'drop', 'extra_dim'])
    if what == 'dtype':
        t['dtype'] = rng.choice(['F16', 'BF16', 'I8', 'U8', 'F64', 'I64', 'F8_E4M3', 'BOOL', 'Q4', ''])
    elif what == 'shape':
        t['shape'] = rng.choice([[], [0], [-1], [2**32, 2**32], [1], [1, 1, 1, 1, 1]])
    elif what == 'shape_dim':
        i = rng.randrange(len(t['shape'])) if t['shape'] else 0
        if t['shape']:
            t['shape'][i] = rng.choice([0, 1, t['shape'][i] + 1, t['shape'][i] * 2, 2**40])
    elif what == 'offsets':
        t['data_offsets'][rng.randrange(2)] = rng.choice([0, -8, len(data) + 4, 2**62, 3])
    elif what == 'offsets_swap':
        t['data_offsets'] = t['data_offsets'][::-1]
    elif what == 'drop':
        del h[name]
    else:
        t['shape'] = t['shape'] + [1]
    st_join(p, h, data)
    return f'safetensors {name} {what} -> {h.get(name)}'


def mut_st_header_bytes(rng, d):
    p = os.path.join(d, 'model.safetensors')
    b = bytearray(open(p, 'rb').read())
    n = struct.unpack('<Q', bytes(b[:8]))[0]
    for _ in range(rng.randint(1, 3)):
        b[8 + rng.randrange(n)] = rng.randrange(32, 127)
    open(p, 'wb').write(bytes(b))
    return 'safetensors header random bytes'


def mut_st_length(rng, d):
    p = os.path.join(d, 'model.safetensors')
    b = bytearray(open(p, 'rb').read())
    v = rng.choice([0, 1, 7, 2**63 - 1, 2**64 - 1, len(b), len(b) - 8, 100000000])
    b[:8] = struct.pack('<Q', v)
    open(p, 'wb').write(bytes(b))
    return f'safetensors header length = {v}'


def mut_st_truncate(rng, d):
    p = os.path.join(d, 'model.safetensors')
    size = os.path.getsize(p)
    n = rng.choice([0, 4, 8, 12, size // 3, size - 1])
    os.truncate(p, n)
    return f'safetensors truncated to {n}'


def mut_st_data_nonfinite(rng, d):
    # A weight value set to NaN/inf: loads (the data is not scanned), and must not give NaN
    # logits silently.
    p = os.path.join(d, 'model.safetensors')
    h, data = st_split(p)
    name = rng.choice([k for k in h if k != '__metadata__' and h[k]['dtype'] == 'F32'])
    b0, b1 = h[name]['data_offsets']
    data = bytearray(data)
    k = b0 + 4 * rng.randrange((b1 - b0) // 4)
    data[k:k + 4] = struct.pack('<f', rng.choice([math.nan, math.inf, -math.inf]))
    st_join(p, h, bytes(data))
    return f'safetensors {name} one value non-finite'


def mut_generation_config_field(rng, d):
    # generation_config.json's values (EOS/BOS ids, temperature, top_p, top_k) of the wrong type
    # or range escaped as nlohmann type_errors before the checked reads (issue 23).
    p = os.path.join(d, 'generation_config.json')
    j = json.load(open(p))
    k = rng.choice(['eos_token_id', 'bos_token_id', 'temperature', 'top_p', 'top_k'])
    v = rng.choice(HOSTILE_VALUES + [['x'], [1, 'y'], [2**40]])
    j[k] = v
    open(p, 'w').write(json.dumps(j))
    return f'generation_config.json {k} = {v!r}'


FOLDER_MUTATIONS = [mut_config_field] * 4 + [mut_config_bytes, mut_st_header_field,
                                             mut_st_header_field, mut_st_header_bytes, mut_st_length,
                                             mut_st_truncate, mut_st_data_nonfinite,
                                             mut_generation_config_field]

# GGUF: byte-level edits of the metadata and tensor-info area (the first `meta` bytes), of
# integer fields found there, truncation, and non-finite weights.


def gguf_meta_end(b):
    # Tensor data starts at the alignment boundary after the tensor infos; the metadata and
    # infos are what a loader parses. Cheap estimate: the last ".weight" name + 64 bytes.
    i = bytes(b).rfind(b'.weight')
    return min(len(b), i + 64) if i > 0 else min(len(b), 4096)


def mut_gguf_bytes(rng, f):
    b = bytearray(open(f, 'rb').read())
    end = gguf_meta_end(b)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(end)] = rng.randrange(256)
    open(f, 'wb').write(bytes(b))
    return 'gguf metadata random bytes'


def mut_gguf_u32(rng, f):
    # Overwrite a 4-byte aligned word in the metadata with a hostile number (counts, lengths,
    # types, dims all live there as u32/u64).
    b = bytearray(open(f, 'rb').read())
    end = gguf_meta_end(b)
    k = 4 * rng.randrange(1, end // 4)
    v = rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 10**7, 64, 13, 0x80000000])
    b[k:k + 4] = struct.pack('<I', v)
    open(f, 'wb').write(bytes(b))
    return f'gguf u32 at {k} = {v}'


def mut_gguf_key_value(rng, f):
    # A float32 hyperparameter key's value set to NaN/0/inf/negative.
    b = bytearray(open(f, 'rb').read())
    keys = [b'layer_norm_rms_epsilon', b'rope.freq_base', b'block_count', b'context_length',
            b'embedding_length', b'head_count', b'head_count_kv', b'feed_forward_length']
    key = rng.choice(keys)
    i = bytes(b).find(key)
    if i < 0:
        return mut_gguf_bytes(rng, f)
    # After the key: u32 value type, then the value.
    vt = struct.unpack('<I', bytes(b[i + len(key):i + len(key) + 4]))[0]
    at = i + len(key) + 4
    if vt == 6:  # f32
        v = rng.choice([math.nan, 0.0, -1.0, math.inf, 1e-45])
        b[at:at + 4] = struct.pack('<f', v)
    else:
        v = rng.choice([0, 1, 0xFFFFFFFF, 10**7, 3])
        b[at:at + 4] = struct.pack('<I', v)
    open(f, 'wb').write(bytes(b))
    return f'gguf {key.decode()} = {v}'


def mut_gguf_truncate(rng, f):
    size = os.path.getsize(f)
    n = rng.choice([0, 4, 8, 16, 24, gguf_meta_end(open(f, 'rb').read()) // 2, size // 2, size - 1])
    os.truncate(f, n)
    return f'gguf truncated to {n}'


GGUF_MUTATIONS = [mut_gguf_bytes, mut_gguf_u32, mut_gguf_u32, mut_gguf_key_value,
                  mut_gguf_key_value, mut_gguf_truncate]

# ---- running -----------------------------------------------------------------------------


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 'hang', ''
    err = p.stderr.decode(errors='replace')
    if p.returncode < 0 or p.returncode >= 128:
        return 'crash', f'rc {p.returncode}: {err[-300:]}'
    if p.returncode != 0:
        lines = [l for l in err.splitlines() if l.strip()]
        clean = len(lines) == 1 and lines[0].startswith('edgeseek: error: ')
        return ('error' if clean else 'garbage'), err.strip()[-300:]
    return 'ok', ''


def judge(cli, model, tmp, timeout):
    """The worst outcome of inspect, generate and logits on `model`, and its detail."""
    order = ['ok', 'error', 'garbage', 'hang', 'crash']
    worst, detail = 'ok', ''
    out = os.path.join(tmp, 'logits.f32')
    for cmd in ([cli, 'inspect', '-m', model],
                [cli, 'generate', '-m', model, '--ids', '1,2', '-n', '2', '-t', '1'],
                [cli, 'logits', '-m', model, '--ids', '1,2', '--out', out, '-t', '1']):
        if os.path.exists(out):
            os.remove(out)
        r, d = run(cmd, timeout)
        if r == 'ok' and cmd[1] == 'logits':
            data = open(out, 'rb').read() if os.path.exists(out) else b''
            vals = struct.unpack(f'<{len(data) // 4}f', data[:len(data) // 4 * 4])
            if not vals or not all(math.isfinite(v) for v in vals):
                r, d = 'garbage', f'exit 0 with {"no" if not vals else "non-finite"} logits'
        if order.index(r) > order.index(worst):
            worst, detail = r, f'{cmd[1]}: {d}'
    return worst, detail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('cli')
    ap.add_argument('--variants', type=int, default=200)
    ap.add_argument('--seed', type=int, default=23)
    ap.add_argument('--timeout', type=float, default=20)
    ap.add_argument('--keep', default='')
    a = ap.parse_args()
    cli = os.path.abspath(a.cli)
    tmp = tempfile.mkdtemp(prefix='es_corrupt_')
    base_gguf = os.path.join(tmp, 'base.gguf')
    subprocess.run([cli, 'convert', BASE, '-o', base_gguf, '--type', 'f32'], check=True, capture_output=True)
    counts, failures = {}, []
    for v in range(a.variants):
        rng = random.Random(a.seed * 100003 + v)
        work = os.path.join(tmp, f'v{v}')
        if v % 3 == 2:
            os.makedirs(work)
            model = os.path.join(work, 'm.gguf')
            shutil.copy(base_gguf, model)
            what = rng.choice(GGUF_MUTATIONS)(rng, model)
        else:
            shutil.copytree(BASE, work)
            model = work
            what = rng.choice(FOLDER_MUTATIONS)(rng, work)
        r, detail = judge(cli, model, tmp, a.timeout)
        counts[r] = counts.get(r, 0) + 1
        if r in ('crash', 'hang', 'garbage'):
            failures.append((v, r, what, detail))
            if a.keep:
                shutil.copytree(work, os.path.join(a.keep, f'v{v}_{r}'), dirs_exist_ok=True)
        shutil.rmtree(work)
    shutil.rmtree(tmp)
    print(f'{a.variants} variants (seed {a.seed}): ' +
          ', '.join(f'{k} {counts.get(k, 0)}' for k in ['ok', 'error', 'garbage', 'hang', 'crash']))
    for v, r, what, detail in failures:
        print(f'  v{v} {r}: {what} -- {detail}')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
