#!/usr/bin/env python3
"""Issue 23's probe: the hostile requests of tests/fuzz/corpus/server_request/ sent round after
round to a running `edgeseek serve`, each on a new connection; counts the answers by status, the
slowest answer (first byte), and the server's RSS after each round (flat RSS = nothing leaks).

    python3 tests/server/hostile_probe.py PORT PID [--requests 1000]

*.json files are POST /v1/chat/completions bodies (Content-Type: application/json); *.http files
are whole raw requests (sent as they are, the connection closed after the answer or 2 s); the
fuzz seeds gen_* are left out.
"""
import argparse, glob, os, socket, time

def rss_kb(pid):
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    return -1

def send(port, raw, timeout=3.0):
    t0 = time.monotonic()
    first = timeout
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    try:
        data = b''
        s.sendall(raw)
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            if not data:
                first = time.monotonic() - t0
            data += chunk
            if b'\r\n\r\n' in data and len(data) > 4096:
                break
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    status = int(data.split(b' ', 2)[1]) if data.startswith(b'HTTP/1.') else 0
    return status, first  # seconds to the answer's first byte

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('port', type=int)
    ap.add_argument('pid', type=int)
    ap.add_argument('--requests', type=int, default=1000)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    # The hand-written hostile cases only: gen_* files are fuzz seeds (scripts/make_fuzz_seeds.py,
    # some valid requests, some in the fuzz targets' amplified form), not HTTP requests.
    corpus = sorted(f for f in glob.glob(os.path.join(here, '../fuzz/corpus/server_request/*'))
                    if not os.path.basename(f).startswith('gen_')
                    and (f.endswith('.json') or f.endswith('.http')))
    cases = []
    for f in corpus:
        body = open(f, 'rb').read()
        if f.endswith('.json'):
            raw = (b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                   b'Connection: close\r\nContent-Length: ' + str(len(body)).encode() + b'\r\n\r\n' + body)
        else:
            raw = body.replace(b'\r\n', b'\n').replace(b'\n', b'\r\n')
        cases.append((os.path.basename(f), raw))
    counts, slowest, rounds, n, per_case = {}, (0.0, ''), [], 0, {}
    while n < a.requests:
        for name, raw in cases:
            if n >= a.requests:
                break
            st, dt = send(a.port, raw)
            counts[st] = counts.get(st, 0) + 1
            per_case.setdefault(name, set()).add(st)
            slowest = max(slowest, (dt, name))
            n += 1
        rounds.append(rss_kb(a.pid))
    print(f'{n} requests over {len(cases)} cases: status counts {dict(sorted(counts.items()))}')
    print('per case: ' + ', '.join(f'{k} {sorted(v)}' for k, v in per_case.items()))
    print(f'slowest answer (first byte) {slowest[0]:.3f} s ({slowest[1]})')
    print(f'server RSS per round (KB): first {rounds[0]}, last {rounds[-1]}, max {max(rounds)}, rounds {len(rounds)}')
    print('RSS every 8th round (KB): ' + ' '.join(str(r) for r in rounds[::8]))

if __name__ == '__main__':
    main()
