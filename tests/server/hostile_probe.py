#!/usr/bin/env python3
"""Issue 23's probe: the hostile requests of tests/fuzz/corpus/server_request/ sent round after
round to a running `edgeseek serve`, each on a new connection; counts the answers by status, the
slowest answer (first byte), and the server's RSS after each round (flat RSS = nothing leaks).
Then SLOW sockets dribble one header byte every 0.5 s while a client's GET /health is timed
against the same request without them. Prints a line per round (flushed), the figures, and
exits 1 when a target of the issue is missed (every answer a 4xx within 2 s, RSS flat, the slow
sockets delaying the client by less than 100 ms).

    echo '{"http_threads": 16, "limits": {"max_body_bytes": 65536}}' > /tmp/hostile.json
    build/edgeseek serve --port 8091 --config /tmp/hostile.json --synthetic \
        tests/server/tiny_config.json --tokenizer tests/data/tiny_tokenizer --alias tiny &
    python3 tests/server/hostile_probe.py 8091 $! [--requests 1000] [--slow 20]

*.json files are POST /v1/chat/completions bodies (Content-Type: application/json); *.http files
are whole raw requests (sent as they are, the connection closed after the answer or 2 s); the
fuzz seeds gen_* are left out.
"""
import argparse, glob, os, socket, sys, threading, time

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
    ap.add_argument('--slow', type=int, default=20, help='slow-header sockets (0: skip)')
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
        round_counts, round_slowest = {}, 0.0
        for name, raw in cases:
            if n >= a.requests:
                break
            st, dt = send(a.port, raw)
            counts[st] = counts.get(st, 0) + 1
            round_counts[st] = round_counts.get(st, 0) + 1
            per_case.setdefault(name, set()).add(st)
            slowest = max(slowest, (dt, name))
            round_slowest = max(round_slowest, dt)
            n += 1
        rounds.append(rss_kb(a.pid))
        print(f'round {len(rounds)}: {dict(sorted(round_counts.items()))}, slowest '
              f'{round_slowest:.3f} s, RSS {rounds[-1]} KB', flush=True)
    print(f'{n} requests over {len(cases)} cases: status counts {dict(sorted(counts.items()))}')
    print('per case: ' + ', '.join(f'{k} {sorted(v)}' for k, v in per_case.items()))
    print(f'slowest answer (first byte) {slowest[0]:.3f} s ({slowest[1]})')
    print(f'server RSS per round (KB): first {rounds[0]}, last {rounds[-1]}, max {max(rounds)}, rounds {len(rounds)}')
    print('RSS every 8th round (KB): ' + ' '.join(str(r) for r in rounds[::8]), flush=True)
    clean = sum(v for k, v in counts.items() if 400 <= k < 500)
    # Flat: the last rounds hold no more than the second round (allocator warm-up) plus 8 MB.
    warm = rounds[1] if len(rounds) > 1 else rounds[0]
    failed = []
    if clean != n:
        failed.append(f'{n - clean} of {n} answers not a 4xx')
    if slowest[0] >= 2.0:
        failed.append(f'an answer took {slowest[0]:.3f} s')
    if max(rounds[1:] or rounds) > warm + 8192:
        failed.append(f'RSS grew from {warm} to {max(rounds)} KB')
    if a.slow > 0:
        delay = slow_header_delay(a.port, a.slow)
        if delay >= 0.1:
            failed.append(f'{a.slow} slow-header sockets delayed a client by {delay * 1000:.0f} ms')
    if os.path.exists(f'/proc/{a.pid}') is False:
        failed.append('the server is gone')
    print('targets: ' + ('all met' if not failed else 'MISSED: ' + '; '.join(failed)), flush=True)
    sys.exit(1 if failed else 0)


def timed_health(port, times=20):
    """The slowest of `times` GET /health answers (whole answer), each on a new connection."""
    worst = 0.0
    for _ in range(times):
        t0 = time.monotonic()
        st, _ = send(port, b'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
        worst = max(worst, time.monotonic() - t0)
        if st != 200:
            return float('inf')
    return worst


def slow_header_delay(port, sockets):
    """How much `sockets` connections dribbling a header byte every 0.5 s slow a client down."""
    base = timed_health(port)
    stop = threading.Event()
    def dribble():
        try:
            s = socket.create_connection(('127.0.0.1', port), timeout=5)
            for b in b'GET /health HTTP/1.1\r\nX-Slow: ' + b'a' * 10000:
                if stop.is_set():
                    break
                s.sendall(bytes([b]))
                stop.wait(0.5)
            s.close()
        except OSError:
            pass  # closed by the server's header deadline: what it should do
    threads = [threading.Thread(target=dribble, daemon=True) for _ in range(sockets)]
    for t in threads:
        t.start()
    time.sleep(1.5)  # every socket connected and dribbling
    loaded = timed_health(port)
    stop.set()
    for t in threads:
        t.join(timeout=2)
    print(f'{sockets} slow-header sockets: slowest GET /health {loaded * 1000:.1f} ms beside them, '
          f'{base * 1000:.1f} ms without (delay {(loaded - base) * 1000:.1f} ms)', flush=True)
    return loaded - base

if __name__ == '__main__':
    main()
