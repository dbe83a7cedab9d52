// Observability and lifecycle: `promtool check metrics` accepts /metrics after real traffic;
// a request's Chrome trace is served; --trace-dir gets the file; a bad config is refused naming
// the field; SIGTERM drains a running stream to its end and exits 0, refusing new work.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { check, cli, main, metrics, startServer, tempFile, tinyConfig, tinyTokenizer } from './lib.mjs';

main(async () => {
  // ---- a bad config never starts ----
  const bad = tempFile('bad.json', JSON.stringify({ models: [{ name: 'm', synthetic: tinyConfig, instances: [{ slots: 0 }] }] }));
  const r = spawnSync(cli, ['serve', '--config', bad, '--port', '0'], { encoding: 'utf8' });
  check(r.status === 1, 'bad config exit ' + r.status);
  check(r.stderr.includes('/models/0/instances/0/slots: 0 is less than the minimum 1'), 'bad config message: ' + r.stderr);

  const traceDir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-traces-'));
  const srv = await startServer(['--slots', '2', '--trace-dir', traceDir, '--drain-grace', '20']);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
  let exitCode = null;
  try {
    // ---- traffic of every kind, then promtool ----
    const done = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 6 });
    await client.completions.create({ model: 'tiny', prompt: 'abc', max_tokens: 3, stream: true }).then(async (s) => { for await (const _ of s); });
    await fetch(srv.base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{' });
    await fetch(srv.base + '/nope');
    const text = await metrics(srv.base);
    const file = tempFile('metrics.txt', text);
    const pc = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    check(pc.status === 0, `promtool check metrics failed (${pc.status}):\n${pc.stdout}${pc.stderr}\n(${file})`);
    for (const name of ['edgeseek_requests_total', 'edgeseek_queue_length', 'edgeseek_running_sequences',
      'edgeseek_waiting_sequences', 'edgeseek_prompt_tokens_total', 'edgeseek_generation_tokens_total',
      'edgeseek_kv_cache_usage_ratio', 'edgeseek_batch_tokens_bucket', 'edgeseek_time_to_first_token_seconds_bucket',
      'edgeseek_inter_token_latency_seconds_bucket', 'edgeseek_e2e_request_latency_seconds_bucket',
      'edgeseek_queue_time_seconds_bucket', 'edgeseek_decode_step_seconds_bucket',
      'edgeseek_step_host_seconds_bucket'])
      check(text.includes('\n' + name), 'metric missing: ' + name);
    check(/edgeseek_requests_total\{endpoint="chat_completions",status="400"\} 1/.test(text), 'a 400 counted');

    // ---- traces ----
    const tr = await fetch(`${srv.base}/v1/traces/${done.id}`);
    check(tr.status === 200, 'trace status ' + tr.status);
    const trace = await tr.json();
    const names = new Set(trace.traceEvents.map((e) => e.name));
    for (const n of ['queue', 'prefill', 'decode']) check(names.has(n), 'trace lacks ' + n);
    check(trace.traceEvents.every((e) => e.ph === 'M' || (typeof e.ts === 'number' && e.ts >= 0)), 'trace timestamps');
    check(fs.existsSync(path.join(traceDir, done.id + '.json')), 'trace file in --trace-dir');

    // ---- SIGTERM drains: a running stream finishes, new requests are refused, exit 0 ----
    const stream = await client.completions.create({ model: 'tiny', prompt: 'drain me', max_tokens: 300, ignore_eos: true, stream: true });
    let got = 0;
    let finish = null;
    let refused = null;
    for await (const chunk of stream) {
      if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      if (++got === 3) {
        srv.proc.kill('SIGTERM');
        await new Promise((r) => setTimeout(r, 100));
        try {
          const h = await fetch(srv.base + '/health');
          refused = h.status;
        } catch (e) {
          refused = 'closed';
        }
      }
    }
    check(finish === 'length', 'drained stream finished with ' + finish);
    check(refused === 503 || refused === 'closed', 'health during drain: ' + refused);
    exitCode = await srv.stop();
    check(exitCode === 0, 'exit code after SIGTERM ' + exitCode);
    check(srv.stderr().includes('drained'), 'drain message');
  } finally {
    if (exitCode === null) await srv.stop('SIGKILL');
  }
});
