// Issue 23's hostile HTTP clients against the real server binary: deep JSON through the real
// chat template, chunked bodies past the limit, header floods, 20 slow-header sockets beside
// normal clients (http_threads 16), missing and lying lengths, 405/415, long /v1/models/ paths
// (RSS stays flat), logit_bias, a non-streaming client that hangs up, and SIGTERM while a
// worker is stuck in a runaway template render. Each hostile body is also a file in
// tests/fuzz/corpus/server_request/.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { check, main, metricValue, metrics, openSockets, root, startServer, tempFile, tinyConfig, tinyTokenizer } from './lib.mjs';

const corpus = path.join(root, 'tests/fuzz/corpus/server_request');
const body = (name) => fs.readFileSync(path.join(corpus, name), 'latin1');

// Raw HTTP over a socket; resolves to what came back when the server closes or after waitMs.
function raw(port, bytes, { waitMs = 4000, drip = null } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let out = Buffer.alloc(0);
    const t0 = Date.now();
    const done = () => resolve({ text: out.toString('latin1'), ms: Date.now() - t0 });
    s.on('data', (d) => (out = Buffer.concat([out, d])));
    s.on('error', done);
    s.on('close', done);
    s.write(bytes);
    if (drip) drip(s);
    setTimeout(() => {
      s.destroy();
      done();
    }, waitMs);
  });
}
const statusOf = (t) => (t.startsWith('HTTP/1.1 ') ? Number(t.slice(9, 12)) : -1);
const jsonOf = (t) => {
  try {
    return JSON.parse(t.slice(t.indexOf('\r\n\r\n') + 4));
  } catch (e) {
    return null;
  }
};
const head = (len, extra = '') =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${len === null ? '' : `Content-Length: ${len}\r\n`}${extra}\r\n`;

function rssKb(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
  return Number(m[1]);
}

async function hostileRequests(srv) {
  const post = async (file, expect, code, param) => {
    const b = body(file);
    const r = await raw(srv.port, head(Buffer.byteLength(b, 'latin1'), 'Connection: close\r\n') + b);
    check(statusOf(r.text) === expect, `${file}: status ${statusOf(r.text)}, expected ${expect}: ${r.text.slice(0, 300)}`);
    const j = jsonOf(r.text);
    check(j && j.error && typeof j.error.message === 'string', `${file}: not an OpenAI error: ${r.text.slice(0, 300)}`);
    if (code) check(j.error.code === code, `${file}: code ${j.error.code}, expected ${code}`);
    if (param) check(j.error.param === param, `${file}: param ${j.error.param}, expected ${param}`);
    check(r.ms < 2000, `${file}: answered after ${r.ms} ms`);
  };
  // The 60 KB request that killed the server, and its siblings through other fields.
  await post('deep_tools.json', 400, 'json_too_deep');
  await post('deep_tool_calls.json', 400, 'json_too_deep');
  await post('deep_chat_template_kwargs.json', 400, 'json_too_deep');
  await post('logit_bias.json', 400, 'unsupported', 'logit_bias');
  await post('too_many_tools.json', 400, null, 'tools');

  // A chunked body past max_body_bytes (64 KB here): 413, read no further.
  const chunk = 'a'.repeat(8192);
  let chunked = head(null, 'Transfer-Encoding: chunked\r\n') + '1\r\n{\r\n';
  for (let i = 0; i < 64; ++i) chunked += `${chunk.length.toString(16)}\r\n${chunk}\r\n`;
  chunked += '0\r\n\r\n';
  let r = await raw(srv.port, chunked);
  check(statusOf(r.text) === 413, 'chunked over the limit: ' + r.text.slice(0, 200));

  // 300 headers: 431.
  let many = 'GET /health HTTP/1.1\r\nHost: x\r\n';
  for (let i = 0; i < 300; ++i) many += `X-H${i}: v\r\n`;
  r = await raw(srv.port, many + '\r\n');
  check(statusOf(r.text) === 431, '300 headers: ' + r.text.slice(0, 200));

  // No length: 411 at once; a length that lies: 408 after 2 s of silence (not the 30 s timeout).
  r = await raw(srv.port, head(null) + '{"messages":[]}');
  check(statusOf(r.text) === 411 && r.ms < 1000, `no Content-Length: ${statusOf(r.text)} after ${r.ms} ms`);
  r = await raw(srv.port, head(1000) + '{"messages":', { waitMs: 6000 });
  check(statusOf(r.text) === 408 && r.ms < 3000, `lying Content-Length: ${statusOf(r.text)} after ${r.ms} ms`);

  // Wrong method, wrong media type (a browser's cross-origin "simple" request).
  let f = await fetch(srv.base + '/v1/chat/completions');
  check(f.status === 405 && f.headers.get('allow') === 'POST', 'GET on a POST endpoint: ' + f.status);
  f = await fetch(srv.base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: body('logit_bias.json') });
  check(f.status === 415, 'text/plain POST: ' + f.status);
  f = await fetch(srv.base + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'prompt=x',
  });
  check(f.status === 415, 'form POST: ' + f.status);

  // 256 GETs of /v1/models/ + 8 KB: answered 404, and the workers' stacks do not grow
  // (issue 23: 13 -> 479 MB).
  const longPath = '/v1/models/' + 'a'.repeat(8000);
  const before = rssKb(srv.proc.pid);
  await Promise.all(Array.from({ length: 16 }, async () => {
    for (let i = 0; i < 16; ++i) {
      const g = await fetch(srv.base + longPath);
      check(g.status === 404, 'long model path: ' + g.status);
      await g.text();
    }
  }));
  const grown = rssKb(srv.proc.pid) - before;
  console.log(`RSS grew ${grown} KB over 256 long-path GETs`);
  check(grown < 32 * 1024, `RSS grew ${grown} KB over 256 long-path GETs`);
}

async function slowClients(srv) {
  // Issue 23: with http_threads 16, twenty sockets dribbling one header byte every 0.5 s locked
  // out every other client.
  const slow = openSockets(srv.port, 20, 'GET /health HTTP/1.1\r\n');
  const timer = setInterval(() => slow.forEach((s) => s.write('X')), 500);
  await new Promise((r) => setTimeout(r, 1200));
  // Each on a new connection: a pooled keep-alive one would already hold its worker.
  let worst = 0;
  for (let i = 0; i < 10; ++i) {
    const h = await raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    worst = Math.max(worst, h.ms);
    check(statusOf(h.text) === 200, 'health beside slow clients: ' + h.text.slice(0, 100));
  }
  const b = JSON.stringify({ prompt: 'still here', max_tokens: 2 });
  const c = await raw(srv.port, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
  check(statusOf(c.text) === 200, 'completion beside slow clients: ' + c.text.slice(0, 100));
  clearInterval(timer);
  slow.forEach((s) => s.destroy());
  console.log(`beside 20 slow-header sockets: /health worst ${worst.toFixed(1)} ms, a completion ${c.ms} ms`);
  check(worst < 100, `a /health beside 20 slow-header sockets took ${worst.toFixed(1)} ms`);
}

async function hangUp(srv) {
  // A non-streaming client that hangs up: its generation stops and its slot is freed.
  const b = JSON.stringify({ prompt: 'a long answer', max_tokens: 1000, ignore_eos: true });
  const s = net.connect(srv.port, '127.0.0.1');
  s.on('error', () => {});
  s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
  const t1 = Date.now();
  while (metricValue(await metrics(srv.base), 'edgeseek_running_sequences') !== 1) {
    check(Date.now() - t1 < 3000, 'the long request never ran');
    await new Promise((r) => setTimeout(r, 10));
  }
  s.destroy();
  const t0 = Date.now();
  let m = '';
  while (Date.now() - t0 < 3000) {
    m = await metrics(srv.base);
    if (metricValue(m, 'edgeseek_request_finish_total', { reason: 'cancelled' }) >= 1 &&
        metricValue(m, 'edgeseek_running_sequences') === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  check(metricValue(m, 'edgeseek_request_finish_total', { reason: 'cancelled' }) >= 1, 'hung-up request not cancelled');
  check(metricValue(m, 'edgeseek_running_sequences') === 0, 'slot still held after the client hung up');
  console.log(`hung-up request cancelled ${Date.now() - t0} ms after the close`);
}

async function sigtermMidRender() {
  // A worker rendering a runaway template ends on the render budget; SIGTERM must end the
  // process within drain_grace_s (1 s) plus signal delivery and teardown (drain_test.mjs has the
  // slow renders under the budget and a long engine step).
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-tok-'));
  for (const f of fs.readdirSync(tinyTokenizer)) fs.copyFileSync(path.join(tinyTokenizer, f), path.join(dir, f));
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const tc = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  tc.chat_template = '{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}';
  fs.writeFileSync(cfgPath, JSON.stringify(tc));
  const srv = await startServer(['--synthetic', tinyConfig, '--tokenizer', dir, '--alias', 'tiny', '--drain-grace', '1'], { model: false });
  fetch(srv.base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }] }),
  }).catch(() => {});
  await new Promise((r) => setTimeout(r, 300));
  const t0 = Date.now();
  const code = await srv.stop();
  const ms = Date.now() - t0;
  console.log(`SIGTERM mid-render: exit ${code} after ${ms} ms`);
  check(ms < 1500, `SIGTERM mid-render took ${ms} ms`);
  check(code === 0 || code === 1, 'exit code ' + code);
}

main(async () => {
  const cfg = tempFile('hard.json', JSON.stringify({ http_threads: 16, limits: { max_body_bytes: 65536 } }));
  const srv = await startServer(['--slots', '4', '--config', cfg]);
  try {
    await hostileRequests(srv);
    await slowClients(srv);
    await hangUp(srv);
    const h = await fetch(srv.base + '/health');
    check(h.status === 200, 'health after the hostile mix: ' + h.status);
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
  await sigtermMidRender();
});
