// Shared helpers of the end-to-end server tests: start `edgeseek serve` on a free loopback port
// with the tiny synthetic model and the tiny tokenizer, wait until /health says ready, stop it,
// read /metrics, and a minimal assertion helper that names what failed.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const root = process.env.ES_SOURCE_DIR || path.resolve(here, '../..');
export const cli = process.env.ES_CLI || path.join(root, 'build/edgeseek');
export const tinyConfig = path.join(here, 'tiny_config.json');
export const tinyTokenizer = path.join(root, 'tests/data/tiny_tokenizer');

export function check(cond, msg) {
  if (!cond) throw new Error('check failed: ' + msg);
}

// n raw sockets to the server at 127.0.0.1:port, each having written `first` (slow or stuck
// clients; errors ignored). The caller writes more or destroys them.
export function openSockets(port, n, first) {
  const socks = [];
  for (let i = 0; i < n; ++i) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.write(first);
    socks.push(s);
  }
  return socks;
}

export function tempFile(name, text) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-serve-'));
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  return p;
}

// Starts the server; resolves to {base, port, proc, stderr(), stop(signal)}.
export async function startServer(extraArgs = [], { model = true, env = {} } = {}) {
  const args = ['serve', '--port', '0'];
  if (model) args.push('--synthetic', tinyConfig, '--tokenizer', tinyTokenizer, '--alias', 'tiny');
  args.push(...extraArgs);
  const proc = spawn(cli, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'pipe'] });
  let err = '';
  const portP = new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      err += d.toString();
      process.stderr.write(d);
      const m = err.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code} before listening:\n${err}`)));
  });
  const port = await portP;
  const base = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  for (;;) {
    try {
      const r = await fetch(base + '/health');
      if (r.status === 200) break;
      check(r.status === 503, `/health while loading answered ${r.status}`);
    } catch (e) {
      // not accepting yet
    }
    if (Date.now() - t0 > 60000) throw new Error('server not ready after 60 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  const exited = once(proc, 'exit');
  return {
    base,
    port,
    proc,
    stderr: () => err,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill(signal);
      const [code] = await exited;
      return code;
    },
  };
}

// With API keys configured /metrics needs one; a client's key shows only its own per-client
// series, a `metrics_keys` key all of them.
export async function metrics(base, key = null) {
  const r = await fetch(base + '/metrics', key ? { headers: { Authorization: 'Bearer ' + key } } : {});
  check(r.status === 200, `/metrics status ${r.status}`);
  return r.text();
}

// Sum of a metric's samples whose labels contain all of `labels`.
export function metricValue(text, name, labels = {}) {
  let sum = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/);
    if (!m || m[1] !== name) continue;
    const ls = m[2] || '';
    if (!Object.entries(labels).every(([k, v]) => ls.includes(`${k}="${v}"`))) continue;
    sum += Number(m[3]);
    found = true;
  }
  return found ? sum : NaN;
}

export async function waitFor(fn, what, timeoutMs = 10000) {
  const t0 = Date.now();
  for (;;) {
    if (await fn()) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export async function main(fn) {
  try {
    await fn();
    console.log('PASS');
    process.exit(0);
  } catch (e) {
    console.error('FAIL:', e && e.stack ? e.stack : e);
    process.exit(1);
  }
}
