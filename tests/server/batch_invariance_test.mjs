// 32 concurrent greedy (and seeded) requests give exactly what 32 sequential runs give: a
// sequence's tokens do not depend on what shares its batch, nor on chunked prefill.
import OpenAI from 'openai';
import { check, main, startServer } from './lib.mjs';

const N = 32;

function prompt(i) {
  // Different lengths so prefill chunks and decode steps of different requests mix.
  return `Request ${i}: ` + 'the quick brown fox jumps over the lazy dog '.repeat(1 + (i % 7));
}

async function run(client, i) {
  const r = await client.completions.create({
    model: 'tiny',
    prompt: prompt(i),
    max_tokens: 20 + (i % 5),
    temperature: i % 4 === 3 ? 0.8 : 0,
    seed: 1000 + i,
    ignore_eos: true,
  });
  return { text: r.choices[0].text, n: r.usage.completion_tokens, finish: r.choices[0].finish_reason };
}

main(async () => {
  const srv = await startServer(['--slots', '16', '--max-batch-tokens', '48']);
  try {
    const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
    const sequential = [];
    for (let i = 0; i < N; ++i) sequential.push(await run(client, i));
    const t0 = Date.now();
    const concurrent = await Promise.all(Array.from({ length: N }, (_, i) => run(client, i)));
    console.log(`32 concurrent requests in ${Date.now() - t0} ms`);
    let distinct = new Set(sequential.map((r) => r.text)).size;
    check(distinct > N / 2, `outputs barely differ between prompts (${distinct} distinct): the test would prove little`);
    for (let i = 0; i < N; ++i) {
      check(concurrent[i].n === 20 + (i % 5), `request ${i}: ${concurrent[i].n} tokens`);
      check(concurrent[i].text === sequential[i].text,
            `request ${i}: concurrent ${JSON.stringify(concurrent[i].text)} != sequential ${JSON.stringify(sequential[i].text)}`);
    }
    const m = await (await fetch(srv.base + '/metrics')).text();
    const batches = m.split('\n').filter((l) => l.startsWith('edgeseek_batch_sequences_bucket') && l.includes('le="+Inf"'));
    check(batches.length === 1, 'batch histogram');
    const le1 = Number((m.match(/edgeseek_batch_sequences_bucket\{[^}]*le="1"\} (\d+)/) || [])[1]);
    const all = Number(batches[0].split(' ').pop());
    check(all - le1 > 0, 'no step ever batched several sequences');
    console.log(`steps: ${all}, with more than one sequence: ${all - le1}`);
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
});
