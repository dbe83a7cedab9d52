// Speculative decoding in the server (docs/speculative.md): greedy completions of a lone request
// are identical with `--spec ngram` and `--draft target` to a server without drafts, streamed or
// not, sampled ones finish with their token counts; /metrics carries the drafted / accepted
// counters (and passes promtool when it is installed); a draft of another vocabulary is refused
// at load with one error naming both models. MTP drafts (`--spec mtp`) on the golden DeepSeek-V3
// checkpoint with an MTP layer: the same, and refused for a model without one.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { check, cli, main, root, metricValue, startServer, tempFile, tinyConfig, tinyTokenizer } from './lib.mjs';

const PROMPTS = [
  'the quick brown fox jumps over the lazy dog '.repeat(4),
  'abc abc abc abc abc abc',
  'Request 7: hello hello hello world',
];

async function completions(base, stream) {
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const out = [];
  for (const p of PROMPTS) {
    const req = { model: 'tiny', prompt: p, max_tokens: 40, temperature: 0, ignore_eos: true };
    if (!stream) {
      const r = await client.completions.create(req);
      out.push({ text: r.choices[0].text, n: r.usage.completion_tokens, finish: r.choices[0].finish_reason });
    } else {
      let text = '';
      let finish = null;
      for await (const c of await client.completions.create({ ...req, stream: true })) {
        text += c.choices[0]?.text ?? '';
        finish = c.choices[0]?.finish_reason ?? finish;
      }
      out.push({ text, n: 40, finish });
    }
  }
  // A sampled request: it must run to its length.
  const s = await client.completions.create({ model: 'tiny', prompt: PROMPTS[0], max_tokens: 25, temperature: 0.9,
                                             seed: 5, ignore_eos: true });
  check(s.usage.completion_tokens === 25, `sampled request: ${s.usage.completion_tokens} tokens`);
  return out;
}

async function serveAndRun(args, opts = {}) {
  const srv = await startServer(args, opts);
  try {
    const plain = await completions(srv.base, false);
    const streamed = await completions(srv.base, true);
    const m = await (await fetch(srv.base + '/metrics')).text();
    return { plain, streamed, m };
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
}

// The tiny tokenizer cut to `vocab` ids (dsv3_mtp has 300): the bytes, the first merges, then its
// special tokens renumbered after them.
function cutTokenizer(vocab) {
  const src = root + '/tests/data/tiny_tokenizer';
  const t = JSON.parse(fs.readFileSync(src + '/tokenizer.json', 'utf8'));
  const keep = vocab - t.added_tokens.length;
  const v = {};
  for (const [k, id] of Object.entries(t.model.vocab)) if (id < keep) v[k] = id;
  t.model.merges = t.model.merges.filter(([a, b]) => (a + b) in v && a in v && b in v);
  t.added_tokens.forEach((a, i) => { a.id = keep + i; v[a.content] = a.id; });
  t.model.vocab = v;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-tok-'));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(t));
  fs.copyFileSync(src + '/tokenizer_config.json', path.join(dir, 'tokenizer_config.json'));
  return dir;
}

async function mtp() {
  const models = root + '/tests/golden/data/models/';
  const tok = cutTokenizer(300);
  const args = ['-m', models + 'dsv3_mtp', '--tokenizer', tok, '--alias', 'tiny'];
  const base = await serveAndRun(args, { model: false });
  const r = await serveAndRun([...args, '--spec', 'mtp', '--spec-k', '2'], { model: false });
  for (let i = 0; i < PROMPTS.length; ++i) {
    check(r.plain[i].text === base.plain[i].text, `mtp: prompt ${i}: ${JSON.stringify(r.plain[i].text)} != ${JSON.stringify(base.plain[i].text)}`);
    check(r.streamed[i].text === base.plain[i].text, `mtp: prompt ${i} streamed differs`);
  }
  const steps = metricValue(r.m, 'edgeseek_spec_steps_total', { model: 'tiny' });
  const drafted = metricValue(r.m, 'edgeseek_spec_drafted_tokens_total', { model: 'tiny' });
  const accepted = metricValue(r.m, 'edgeseek_spec_accepted_tokens_total', { model: 'tiny' });
  console.log(`--spec mtp: ${steps} steps, ${drafted} drafted, ${accepted} accepted`);
  check(steps > 0 && drafted > 0 && accepted >= 0 && accepted <= drafted, 'mtp spec counters');
  // A model without MTP layers: one clear error at load.
  const bad = spawnSync(cli, ['serve', '--port', '0', '-m', models + 'dsv3', '--tokenizer', tok, '--spec', 'mtp'],
                        { encoding: 'utf8', timeout: 60000 });
  check(bad.status !== 0, 'server started with --spec mtp on a model without MTP layers');
  check(/has no MTP layers/.test(bad.stderr), 'error: ' + bad.stderr);
}

main(async () => {
  await mtp();
  const base = await serveAndRun([]);
  check(Number.isNaN(metricValue(base.m, 'edgeseek_spec_steps_total')), 'spec counters without a drafter');
  for (const args of [['--spec', 'ngram', '--spec-k', '4'], ['--draft', 'target', '--spec-k', '3']]) {
    const r = await serveAndRun(args);
    for (let i = 0; i < PROMPTS.length; ++i) {
      check(r.plain[i].text === base.plain[i].text,
            `${args.join(' ')}: prompt ${i}: ${JSON.stringify(r.plain[i].text)} != ${JSON.stringify(base.plain[i].text)}`);
      check(r.plain[i].n === 40 && r.plain[i].finish === 'length', `${args.join(' ')}: prompt ${i}: ${r.plain[i].n} tokens`);
      check(r.streamed[i].text === base.plain[i].text, `${args.join(' ')}: prompt ${i} streamed differs`);
    }
    const steps = metricValue(r.m, 'edgeseek_spec_steps_total', { model: 'tiny' });
    const drafted = metricValue(r.m, 'edgeseek_spec_drafted_tokens_total', { model: 'tiny' });
    const accepted = metricValue(r.m, 'edgeseek_spec_accepted_tokens_total', { model: 'tiny' });
    const emitted = metricValue(r.m, 'edgeseek_spec_emitted_tokens_total', { model: 'tiny' });
    console.log(`${args.join(' ')}: ${steps} steps, ${drafted} drafted, ${accepted} accepted, ${emitted} emitted`);
    check(steps > 0 && drafted > 0 && accepted >= 0 && accepted <= drafted, 'spec counters');
    check(emitted >= steps && emitted <= steps + accepted, 'emitted tokens');
    if (args[1] === 'target') check(accepted === drafted, 'draft = target: every draft accepted (greedy)');
    const promtool = spawnSync('promtool', ['check', 'metrics'], { input: r.m });
    if (!promtool.error) check(promtool.status === 0, 'promtool: ' + promtool.stdout + promtool.stderr);
  }
  // A draft of another vocabulary: one clear error at load, naming both models.
  const dir = root + '/tests/golden/data/models/llama3';  // 320 tokens against tiny's 384
  const conf = tempFile('server.json', JSON.stringify({
    models: [{ name: 'tiny', synthetic: tinyConfig, tokenizer: tinyTokenizer, speculative: { draft: dir } }],
  }));
  const bad = spawnSync(cli, ['serve', '--port', '0', '--config', conf], { encoding: 'utf8', timeout: 60000 });
  check(bad.status !== 0, 'server started with a mismatched draft');
  check(/draft model/.test(bad.stderr) && /different vocabularies/.test(bad.stderr), 'error: ' + bad.stderr);
});
