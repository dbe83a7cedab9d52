// SIGTERM ends `edgeseek serve` within --drain-grace even when work that cannot be interrupted
// is in progress (issue 23): an engine step (one prefill of 4,000 tokens through a 60M-parameter
// model on one thread: ~500 GFLOP, tens of seconds here, several on any CPU) and chat template renders under the render budget but slow
// (~0.5 s each, eight at once on the HTTP threads). Before, the process lived up to the grace
// plus 3 s (the drain waited the whole grace for running requests, then 2 s more for the
// cancelled ones, then joined the stuck engine). Each case: exit within the grace plus 0.5 s
// (signal delivery and process teardown), and the message says what was still running.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { check, main, metricValue, metrics, startServer, tempFile, tinyConfig, tinyTokenizer } from './lib.mjs';

const kGraceS = 1;
const kSlackMs = 500;

// The tiny model's vocabulary and tokenizer, 16x wider and 2x deeper: a 4,000-token prefill on
// one thread takes seconds where the tiny model's takes milliseconds.
const slowConfig = {
  architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', hidden_act: 'silu', hidden_size: 1024,
  intermediate_size: 4096, num_hidden_layers: 4, num_attention_heads: 16, num_key_value_heads: 4,
  max_position_embeddings: 8192, rms_norm_eps: 1e-6, rope_theta: 1e6, tie_word_embeddings: true,
  bos_token_id: 376, eos_token_id: 378, vocab_size: 384, torch_dtype: 'float32',
};

async function timedStop(srv) {
  const t0 = Date.now();
  const code = await srv.stop();
  return { code, ms: Date.now() - t0 };
}

async function midStep() {
  const cfg = tempFile('slow_config.json', JSON.stringify(slowConfig));
  const srv = await startServer(['--synthetic', cfg, '--tokenizer', tinyTokenizer, '--alias', 'slow', '-t', '1',
    '--context', '4096', '--slots', '1', '--max-batch-tokens', '4096', '--drain-grace', String(kGraceS)], { model: false });
  const prompt = Array.from({ length: 4000 }, (_, i) => i % 376);
  const sent = Date.now();
  const answer = fetch(srv.base + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt, max_tokens: 4 }),
  }).then((r) => r.status, () => 'closed');
  // Admitted, then picked up by the engine at its next wake-up (<= 50 ms); the gauges of running
  // sequences are published after the step, so they cannot tell.
  for (;;) {
    const m = await metrics(srv.base);
    if (metricValue(m, 'edgeseek_requests_in_flight') >= 1) break;
    check(Date.now() - sent < 10000, 'the request was never admitted');
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 500));
  const { code, ms } = await timedStop(srv);
  console.log(`SIGTERM mid-step: exit ${code} after ${ms} ms (request sent ${Date.now() - sent} ms ago), answer ${await answer}`);
  check(ms < kGraceS * 1000 + kSlackMs, `SIGTERM mid-step ended the process after ${ms} ms, grace ${kGraceS} s`);
  // The step outlived the grace (else the case tested nothing): no answer, and the deadline ended it.
  check((await answer) !== 200, 'the prefill finished before the grace: make the step longer');
  check(code === 1 && /did not finish within 1 s of the signal/.test(srv.stderr()), `exit ${code}: not ended by the deadline`);
}

async function midRender() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-tok-'));
  for (const f of fs.readdirSync(tinyTokenizer)) fs.copyFileSync(path.join(tinyTokenizer, f), path.join(dir, f));
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const tc = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  // Within the render budget (12M of 20M steps), ~0.5 s a render on one core.
  tc.chat_template = "{% set s = 'ab' * 4000000 %}{% for i in range(3) %}{{ s|wordcount }}{% endfor %}";
  fs.writeFileSync(cfgPath, JSON.stringify(tc));
  const srv = await startServer(['--synthetic', tinyConfig, '--tokenizer', dir, '--alias', 'tiny', '--drain-grace', String(kGraceS)],
    { model: false });
  const answers = [];
  for (let i = 0; i < 8; ++i)
    answers.push(fetch(srv.base + '/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }),
    }).then((r) => r.status, () => 'closed'));
  await new Promise((r) => setTimeout(r, 150));
  const { code, ms } = await timedStop(srv);
  console.log(`SIGTERM mid-render: exit ${code} after ${ms} ms, answers ${(await Promise.all(answers)).join(' ')}`);
  check(ms < kGraceS * 1000 + kSlackMs, `SIGTERM mid-render ended the process after ${ms} ms, grace ${kGraceS} s`);
  check(code === 0 || code === 1, 'exit code ' + code);
}

main(async () => {
  await midStep();
  await midRender();
});
