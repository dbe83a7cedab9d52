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

main(async () => {
  const srv = await startServer(['--slots', '2', '--config', tempFile('qos.json', JSON.stringify(config))]);
  try {
    const mk = (key) => new OpenAI({ baseURL: srv.base + '/v1', apiKey: key, maxRetries: 0, timeout: 120000 });

    // ---- 1. priorities: 16 low-priority streams keep both slots busy and the queue full ----
    const p = mk('sk-p');
    let stopLoad = false;
    const load = Array.from({ length: 16 }, async () => {
      while (!stopLoad) {
        await p.completions.create({ model: 'tiny', prompt: 'background work', max_tokens: 48, ignore_eos: true, priority: 'low' });
      }
    });
    await new Promise((r) => setTimeout(r, 500));
    const hi = [];
    const lo = [];
    for (let i = 0; i < 6; ++i) {
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
    check(mean(hi) * 2 < mean(lo), `high-priority TTFT ${mean(hi).toFixed(1)} ms is not well below low ${mean(lo).toFixed(1)} ms`);
    const m1 = await metrics(srv.base);
    check(metricValue(m1, 'edgeseek_time_to_first_token_seconds_count', { priority: 'high' }) === 6, 'high TTFT count');
    check(metricValue(m1, 'edgeseek_queue_time_seconds_count', { priority: 'low' }) > 6, 'low queue time count');

    // ---- 2. weighted clients: 8 outstanding requests each, both always backlogged ----
    const a = mk('sk-a');
    const b = mk('sk-b');
    const before = await metrics(srv.base);
    const start = { a: metricValue(before, 'edgeseek_client_generation_tokens_total', { client: 'a' }) || 0,
                    b: metricValue(before, 'edgeseek_client_generation_tokens_total', { client: 'b' }) || 0 };
    let stop = false;
    const tokens = { a: 0, b: 0 };
    const worker = (cl, name) => (async () => {
      while (!stop) {
        const r = await cl.completions.create({ model: 'tiny', prompt: 'share ' + name, max_tokens: 24, ignore_eos: true });
        if (!stop) tokens[name] += r.usage.completion_tokens;
      }
    })();
    const workers = [];
    for (let i = 0; i < 8; ++i) workers.push(worker(a, 'a'), worker(b, 'b'));
    await new Promise((r) => setTimeout(r, 1000));  // warm up: both backlogged
    tokens.a = 0;
    tokens.b = 0;
    await new Promise((r) => setTimeout(r, 6000));
    stop = true;
    const window = { ...tokens };
    await Promise.all(workers);
    const ratio = window.a / window.b;
    console.log(`weighted clients: a ${window.a} tokens, b ${window.b} tokens, ratio ${ratio.toFixed(3)}`);
    check(window.b > 100, 'too few tokens for client b to judge: ' + window.b);
    check(ratio > 2.7 && ratio < 3.3, `token ratio ${ratio.toFixed(3)} is not within 10% of 3`);
    const after = await metrics(srv.base);
    const da = metricValue(after, 'edgeseek_client_generation_tokens_total', { client: 'a' }) - start.a;
    const db = metricValue(after, 'edgeseek_client_generation_tokens_total', { client: 'b' }) - start.b;
    check(da > db * 2, `metrics by client: a ${da}, b ${db}`);
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
});
