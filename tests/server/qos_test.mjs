// QoS under saturation: (1) high-priority requests (field `priority` or header X-Priority) get
// their first token sooner than low-priority ones; (2) two API keys with weights 3:1 share the
// generated tokens 3:1 within ±10%.
import OpenAI from 'openai';
import { check, main, metrics, metricValue, startServer, tempFile } from './lib.mjs';

const config = {
  priorities: [
    { name: 'high', weight: 16 },
    { name: 'low', weight: 1 },
  ],
  default_priority: 'low',
  clients: [
    { api_key: 'sk-a', name: 'a', weight: 3 },
    { api_key: 'sk-b', name: 'b', weight: 1 },
    { api_key: 'sk-p', name: 'p', weight: 1 },
  ],
  limits: { max_concurrent_per_client: 64 },
  metrics_keys: ['sk-ops'],  // the per-client shares are read from every client's series
};

function mean(xs) {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

async function ttft(client, opts, headers) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create(
    { model: 'tiny', messages: [{ role: 'user', content: 'Go.' }], max_tokens: 8, ignore_eos: true, stream: true, ...opts },
    { headers },
  );
  let first = null;
  for await (const chunk of stream) {
    if (first === null && chunk.choices.length && chunk.choices[0].delta.content) first = performance.now() - t0;
  }
  return first ?? performance.now() - t0;
}

// Waits (up to 5 s) until /metrics shows at least n low-priority requests queued, so that a probe
// sent next really waits behind them. On a quiet machine the 32 loops' HTTP turnaround can leave
// the queue empty for a moment, and a low probe then starts as fast as a high one (CI,
// 2026-11-30: low 59 ms against high 46).
async function backlogged(base, n) {
  const t0 = performance.now();
  while (performance.now() - t0 < 5000) {
    if ((metricValue(await metrics(base, 'sk-ops'), 'edgeseek_queue_length', { priority: 'low' }) || 0) >= n) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

main(async () => {
  const srv = await startServer(['--slots', '2', '--config', tempFile('qos.json', JSON.stringify(config))]);
  try {
    const mk = (key) => new OpenAI({ baseURL: srv.base + '/v1', apiKey: key, maxRetries: 0, timeout: 120000 });

    // ---- 1. priorities: 16 low-priority streams keep both slots busy and the queue full ----
    const p = mk('sk-p');
    let stopLoad = false;
    const load = Array.from({ length: 32 }, async () => {
      while (!stopLoad) {
        await p.completions.create({ model: 'tiny', prompt: 'background work', max_tokens: 128, ignore_eos: true, priority: 'low' });
      }
    });
    await new Promise((r) => setTimeout(r, 500));
    const hi = [];
    const lo = [];
    for (let i = 0; i < 6; ++i) {
      await backlogged(srv.base, 8);
      const [h, l] = await Promise.all([
        i % 2 ? ttft(p, { priority: 'high' }) : ttft(p, {}, { 'X-Priority': 'high' }),
        ttft(p, { priority: 'low' }),
      ]);
      hi.push(h);
      lo.push(l);
    }
    stopLoad = true;
    await Promise.all(load);
    console.log(`TTFT ms: high ${hi.map((x) => x.toFixed(0))} (mean ${mean(hi).toFixed(1)}), low ${lo.map((x) => x.toFixed(0))} (mean ${mean(lo).toFixed(1)})`);
    check(mean(hi) * 1.5 < mean(lo), `high-priority TTFT ${mean(hi).toFixed(1)} ms is not well below low ${mean(lo).toFixed(1)} ms`);
    const m1 = await metrics(srv.base, 'sk-ops');
    check(metricValue(m1, 'edgeseek_time_to_first_token_seconds_count', { priority: 'high' }) === 6, 'high TTFT count');
    check(metricValue(m1, 'edgeseek_queue_time_seconds_count', { priority: 'low' }) > 6, 'low queue time count');

    // ---- 2. weighted clients: both must be backlogged for shares to mean anything, so each
    // keeps more requests out than it can have running (a 24, b 8: proportional to the weights,
    // so neither runs dry during an HTTP turnaround on a loaded machine). The share is read from
    // the server's per-client token counter (counted per token as generated) and summed only
    // over the sampling intervals where /metrics showed both clients with requests waiting at
    // both ends: the saturated window, not the ramp-up or the tail. ----
    const a = mk('sk-a');
    const b = mk('sk-b');
    let stop = false;
    const worker = (cl, name) => (async () => {
      while (!stop) await cl.completions.create({ model: 'tiny', prompt: 'share ' + name, max_tokens: 48, ignore_eos: true });
    })();
    const workers = [];
    for (let i = 0; i < 24; ++i) workers.push(worker(a, 'a'));
    for (let i = 0; i < 8; ++i) workers.push(worker(b, 'b'));
    const sample = async () => {
      const m = await metrics(srv.base, 'sk-ops');
      const v = (name, client) => metricValue(m, name, { client }) || 0;
      return {
        a: v('edgeseek_client_generation_tokens_total', 'a'),
        b: v('edgeseek_client_generation_tokens_total', 'b'),
        saturated: v('edgeseek_client_queue_length', 'a') > 0 && v('edgeseek_client_queue_length', 'b') > 0,
      };
    };
    let da = 0;
    let db = 0;
    let intervals = 0;
    let dry = 0;
    await new Promise((r) => setTimeout(r, 1000));  // ramp-up: every worker has sent its first request
    const start = Date.now();
    let prev = await sample();
    // At least 12 saturated intervals (3 s) and 1000 tokens of b's in them, at most 60 s.
    while (Date.now() - start < 60000 && (intervals < 12 || db < 1000)) {
      await new Promise((r) => setTimeout(r, 250));
      const cur = await sample();
      if (prev.saturated && cur.saturated) {
        da += cur.a - prev.a;
        db += cur.b - prev.b;
        ++intervals;
      } else {
        ++dry;
      }
      prev = cur;
    }
    stop = true;
    await Promise.all(workers);
    const ratio = da / db;
    console.log(`weighted clients over ${((Date.now() - start) / 1000).toFixed(1)} s: ${intervals} saturated intervals ` +
                `(${dry} not), a ${da} tokens, b ${db} tokens, ratio ${ratio.toFixed(3)}`);
    check(intervals >= 12 && db >= 1000, `too little saturated time to judge: ${intervals} intervals, ${db} tokens of b`);
    check(ratio > 2.7 && ratio < 3.3, `token ratio ${ratio.toFixed(3)} is not within 10% of the 3:1 weights`);
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
});
