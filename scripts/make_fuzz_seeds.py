#!/usr/bin/env python3
"""Writes the generated seeds of the fuzz corpora (issue 21) under tests/fuzz/corpus/<target>/,
files named gen_*: small valid inputs for each target (a GGUF with a few keys and a tensor, a
safetensors file, GBNF and JSON schemas, a config.json, a tokenizer.json), and compact
amplified inputs (tests/fuzz/fuzz_util.h Expand: 0xFF, count (u16 LE), prefix, 0, middle, 0,
suffix) for the deep and big cases that once broke the parsers. Every file stays below 8 KB;
the hand-written hostile cases beside them (issue 23) are kept as they are. Deterministic,
standard library only:  python3 scripts/make_fuzz_seeds.py
"""
import json, os, struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
CORPUS = os.path.join(ROOT, 'tests/fuzz/corpus')


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < 8192, (target, name, len(data))
    with open(os.path.join(d, 'gen_' + name), 'wb') as f:
        f.write(data)


def amplify(prefix, middle, count, suffix, lead=b''):
    """Expand's form; `lead` goes before it (the grammar target's selector byte)."""
    enc = lambda s: s.encode() if isinstance(s, str) else s
    return lead + b'\xff' + struct.pack('<H', count) + enc(prefix) + b'\0' + enc(middle) + b'\0' + \
        enc(suffix)


# ---- GGUF (v3): header, metadata, tensor infos, data aligned to 32 ----------------------
def gguf_str(s):
    s = s.encode()
    return struct.pack('<Q', len(s)) + s


def gguf_kv(key, vtype, payload):
    return gguf_str(key) + struct.pack('<I', vtype) + payload


def gguf(kvs, tensors, version=3):
    out = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    data, infos = b'', b''
    for name, dims, ggml_type, raw in tensors:
        infos += gguf_str(name) + struct.pack('<I', len(dims)) + b''.join(
            struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', ggml_type, len(data))
        data += raw + b'\0' * ((-len(raw)) % 32)
    out += infos
    out += b'\0' * ((-len(out)) % 32)
    return out + data


U32, F32, BOOL, STRING, ARRAY = 4, 6, 7, 8, 9
base_kvs = [
    gguf_kv('general.architecture', STRING, gguf_str('qwen2')),
    gguf_kv('general.alignment', U32, struct.pack('<I', 32)),
    gguf_kv('qwen2.block_count', U32, struct.pack('<I', 1)),
    gguf_kv('qwen2.embedding_length', U32, struct.pack('<I', 8)),
    gguf_kv('qwen2.attention.layer_norm_rms_epsilon', F32, struct.pack('<f', 1e-6)),
    gguf_kv('tokenizer.ggml.tokens', ARRAY,
            struct.pack('<IQ', STRING, 3) + gguf_str('a') + gguf_str('b') + gguf_str('ab')),
    gguf_kv('general.flag', BOOL, b'\x01'),
]
f32 = lambda vals: struct.pack('<%df' % len(vals), *vals)
write('gguf_metadata', 'tiny.gguf', gguf(base_kvs, [('token_embd.weight', [8, 3], 0,
                                                      f32([0.5] * 24)),
                                                     ('output_norm.weight', [8], 0, f32([1] * 8))]))
write('gguf_metadata', 'v2_no_tensors.gguf', gguf(base_kvs[:3], [], version=2))
write('gguf_metadata', 'nested_array.gguf', gguf(
    [gguf_kv('x.nested', ARRAY, struct.pack('<IQ', ARRAY, 1) + struct.pack('<IQ', U32, 2) +
             struct.pack('<II', 1, 2))], []))
write('gguf_metadata', 'huge_counts.gguf', b'GGUF' + struct.pack('<IQQ', 3, 2**40, 2**40))
write('gguf_metadata', 'huge_string.gguf', b'GGUF' + struct.pack('<IQQ', 3, 0, 1) +
      struct.pack('<Q', 2**62) + b'k')
write('gguf_metadata', 'tensor_past_end.gguf', gguf(base_kvs[:2], [('t', [1 << 20, 1 << 20], 0,
                                                                    f32([1] * 4))]))

# ---- safetensors: u64 header length, JSON header, data -----------------------------------
def safetensors(header, data):
    h = json.dumps(header, separators=(',', ':')).encode()
    return struct.pack('<Q', len(h)) + h + data


write('safetensors_header', 'tiny.safetensors', safetensors(
    {'__metadata__': {'format': 'pt'},
     'a': {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [0, 24]},
     'b': {'dtype': 'BF16', 'shape': [4], 'data_offsets': [24, 32]}}, f32([1] * 6) + b'\0' * 8))
write('safetensors_header', 'overlap.safetensors', safetensors(
    {'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
     'b': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}, f32([1] * 3)))
write('safetensors_header', 'shape_overflow.safetensors', safetensors(
    {'a': {'dtype': 'F32', 'shape': [2**32, 2**32, 16], 'data_offsets': [0, 8]}}, f32([1] * 2)))
# A number past double's range is nlohmann's out_of_range, not its parse_error (found by the
# safetensors fuzzer: it escaped the loader's catch).
hdr = b'{"a":{"dtype":"F32","shape":[1e99999],"data_offsets":[0,4]}}'
write('safetensors_header', 'number_overflow.safetensors', struct.pack('<Q', len(hdr)) + hdr +
      f32([1]))
write('tokenizer_json', 'number_overflow.json', '{"model":{"type":"BPE","vocab":{"a":1e99999}}}')
write('safetensors_header', 'header_len_huge.safetensors', struct.pack('<Q', 2**63) + b'{}')
write('safetensors_header', 'deep_metadata.safetensors',
      struct.pack('<Q', 6003) + b'{"a":' + b'[' * 2999 + b']' * 2999 + b'}' + b'\0' * 0)

# ---- grammar: first byte even = GBNF, odd = JSON schema ----------------------------------
write('grammar', 'gbnf_json.gbnf', b'\0' + b'''root ::= object
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}"
value ::= object | array | string | number | ("true" | "false" | "null")
array ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\\"" ( [^"\\\\] | "\\\\" ["\\\\/bfnrt] )* "\\""
number ::= "-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws ::= [ \\t\\n]{0,4}
''')
write('grammar', 'gbnf_repeat.gbnf', b'\0root ::= "a"{2,5} b? | [a-zA-Z_]+ "x"*\nb ::= "b"{1000}\n')
write('grammar', 'gbnf_deep_parens.gbnf', amplify('root ::= ', '(', 20000, '"a"' + ')' * 10, b'\0'))
write('grammar', 'gbnf_left_recursion.gbnf', b'\0root ::= root "a" | "b"\n')
write('grammar', 'schema_object.json', b'\x01' + json.dumps({
    'type': 'object', 'required': ['name', 'age'],
    'properties': {'name': {'type': 'string', 'minLength': 1, 'maxLength': 20},
                   'age': {'type': 'integer', 'minimum': 0, 'maximum': 150},
                   'tags': {'type': 'array', 'items': {'enum': ['a', 'b', 3]}, 'maxItems': 4},
                   'kind': {'anyOf': [{'const': 'x'}, {'type': 'null'}]},
                   'ref': {'$ref': '#/$defs/point'}},
    '$defs': {'point': {'type': 'object', 'properties': {'x': {'type': 'number'}}}},
    'additionalProperties': False}).encode())
write('grammar', 'schema_deep_items.json', amplify('', '{"type":"array","items":', 2000,
                                                   '{"type":"string"}' + '}' * 2000, b'\x01'))
write('grammar', 'schema_ref_cycle.json', b'\x01' + json.dumps(
    {'$ref': '#/$defs/a',
     '$defs': {'a': {'$ref': '#/$defs/b'}, 'b': {'$ref': '#/$defs/a'}}}).encode())
write('grammar', 'schema_deep_json.json', amplify('', '[', 60000, '', b'\x01'))

# ---- request bodies, templates, configs, tokenizers: amplified deep/big forms ------------
write('server_request', 'deep_tools_30000.bin', amplify(
    '{"messages":[{"role":"user","content":"x"}],"tools":[', '[', 30000, ']' * 10 + ']}'))
write('server_request', 'many_messages.bin', amplify(
    '{"messages":[', '{"role":"user","content":"x"},', 5000, '{"role":"user","content":"y"}]}'))
write('server_request', 'valid_chat.json', json.dumps(
    {'model': 'm', 'messages': [{'role': 'system', 'content': 's'},
                                {'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}],
     'max_tokens': 8, 'temperature': 0.7, 'top_p': 0.9, 'stop': ['\n'], 'stream': True,
     'seed': 3, 'logprobs': True, 'top_logprobs': 2,
     'response_format': {'type': 'json_schema', 'json_schema': {
         'name': 'x', 'schema': {'type': 'object', 'properties': {'a': {'type': 'integer'}}}}},
     'tools': [{'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}],
     'tool_choice': 'auto'}))
write('server_request', 'valid_completion.json', json.dumps(
    {'model': 'm', 'prompt': ['a', 'b'], 'max_tokens': 4, 'echo': True, 'n': 1}))
write('chat_template', 'plus_chain_20000.bin', amplify('{{ 1', ' + 1', 20000, ' }}'))
write('chat_template', 'nested_if_5000.bin', amplify('', '{% if true %}', 5000, 'x'))
write('chat_template', 'chatml.jinja', (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') }}"
    "{% if m.tool_calls %}{% for t in m.tool_calls %}{{ t.function.name }}"
    "{{ t.function.arguments | tojson }}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"))
cfg_path = os.path.join(ROOT, 'tests/golden/data/models/qwen2_tied/config.json')
cfg = json.load(open(cfg_path))
write('model_config', 'qwen2_tied.json', json.dumps(cfg))
write('model_config', 'deep_rope_scaling.bin', amplify('{"rope_scaling":', '[', 60000, ''))
for field, value in [('num_attention_heads', 0), ('num_key_value_heads', 3), ('hidden_size', -8),
                     ('vocab_size', 2**40), ('intermediate_size', 1e300),
                     ('rms_norm_eps', 'NaN'), ('max_position_embeddings', 0)]:
    c = dict(cfg)
    c[field] = value
    write('model_config', f'{field}_{value}.json', json.dumps(c))
tok = json.load(open(os.path.join(ROOT, 'tests/data/tiny_tokenizer/tokenizer.json')))
small = json.loads(json.dumps(tok))
small['model']['vocab'] = {k: v for k, v in tok['model']['vocab'].items() if v < 260}
small['model']['merges'] = tok['model']['merges'][:4]
write('tokenizer_json', 'tiny_bpe.json', json.dumps(small))
write('tokenizer_json', 'deep_normalizer.bin', amplify(
    '{"normalizer":', '{"type":"Sequence","normalizers":[', 20000, ''))
print('seeds written under', os.path.relpath(CORPUS))
