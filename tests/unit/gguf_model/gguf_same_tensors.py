#!/usr/bin/env python3
# Compares the tensors of two GGUF files (used by llama_cpp_crosscheck.sh): prints
# "S/N same type, B/S byte-identical" over the N tensor names both files hold.
import struct, sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml type -> (block elements, block bytes)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}

def read(path):
    b = open(path, 'rb').read()
    o = 0
    def u(fmt):
        nonlocal o
        v = struct.unpack_from('<' + fmt, b, o); o += struct.calcsize('<' + fmt); return v[0]
    def s():
        nonlocal o
        n = u('Q'); v = b[o:o + n]; o += n; return v.decode('utf-8', 'replace')
    def skip(t):
        nonlocal o
        if t == 8: s()
        elif t == 9:
            et, n = u('I'), u('Q')
            for _ in range(n): skip(et)
        else: o += SIZES[t]
    assert b[:4] == b'GGUF'; o = 4
    u('I'); nt, nkv = u('Q'), u('Q')
    align = 32
    for _ in range(nkv):
        k = s(); t = u('I')
        if k == 'general.alignment': align = u('I')
        else: skip(t)
    infos = []
    for _ in range(nt):
        name = s(); nd = u('I'); ne = [u('Q') for _ in range(nd)]; ty = u('I'); off = u('Q')
        infos.append((name, ne, ty, off))
    data = (o + align - 1) // align * align
    out = {}
    for name, ne, ty, off in infos:
        be, bb = BLOCKS[ty]; n = 1
        for d in ne: n *= d
        out[name] = (ty, b[data + off: data + off + n // be * bb])
    return out

a, b = read(sys.argv[1]), read(sys.argv[2])
common = [k for k in a if k in b]
same_type = [k for k in common if a[k][0] == b[k][0]]
same_bytes = [k for k in same_type if a[k][1] == b[k][1]]
print(f"{len(same_type)}/{len(common)} same type, {len(same_bytes)}/{len(same_type)} byte-identical")
if len(sys.argv) > 3:
    for k in common:
        if a[k][0] != b[k][0]: print(f"  {k}: types {a[k][0]} vs {b[k][0]}")
        elif a[k][1] != b[k][1]: print(f"  {k}: type {a[k][0]}, bytes differ")
