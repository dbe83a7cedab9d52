// --profile and --deterministic on the real binary: (1) CPU: the flags are accepted and reported
// by /health and /v1/models, and each prefill/decode step of a request's trace carries the
// backend's time split (the CPU backend reports its compute as `shader`, no transfers);
// (2) Vulkan (lavapipe here; skipped with a message when `edgeseek devices` finds no device):
// upload, shader and download are all measured, the instance runs serially under
// --deterministic, and concurrent greedy requests give exactly their solo outputs although the
// Vulkan kernels are not batch-invariant by themselves.
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { check, cli, main, startServer } from './lib.mjs';

async function getJson(url) {
  const r = await fetch(url);
  check(r.status === 200, `${url}: status ${r.status}`);
  return r.json();
}

// Steps (prefill/decode events) of one request's trace and its nested backend slices.
async function traceOf(base, id) {
  const t = await getJson(`${base}/v1/traces/${id}`);
  const steps = t.traceEvents.filter((e) => e.name === 'prefill' || e.name === 'decode');
  const phases = t.traceEvents.filter((e) => e.cat === 'backend');
  return { steps, phases };
}

async function complete(base, prompt, maxTokens) {
  const r = await fetch(`${base}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true }),
  });
  check(r.status === 200, `completion status ${r.status}`);
  return r.json();
}

function vulkanDevice() {
  try {
    const out = execFileSync(cli, ['devices'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    return /^\[0\]/m.test(out);
  } catch (e) {
    return false;
  }
}

main(async () => {
  // ---- 1. CPU ----
  {
    const srv = await startServer(['--profile', '--deterministic', '--slots', '2']);
    try {
      const health = await getJson(srv.base + '/health');
      check(health.deterministic === true && health.profile === true && health.batch_invariant === true,
            'health: ' + JSON.stringify(health));
      const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
      const models = await client.models.list();
      const meta = models.data[0].edgeseek;
      check(meta && meta.deterministic === true && meta.batch_invariant === true, 'models: ' + JSON.stringify(meta));
      check(meta.instances[0].serial === false, 'the CPU instance should keep batching: ' + JSON.stringify(meta));
      const out = await complete(srv.base, 'profile me', 4);
      const { steps, phases } = await traceOf(srv.base, out.id);
      check(steps.length === 4, `expected 1 prefill + 3 decodes, got ${steps.length}`);
      for (const s of steps) {
        const a = s.args;
        check(a.shader_ms > 0 && a.backend_ms > 0, 'CPU step without compute time: ' + JSON.stringify(a));
        check(a.upload_ms === 0 && a.download_ms === 0, 'CPU step with transfers: ' + JSON.stringify(a));
      }
      check(phases.length === steps.length && phases.every((p) => p.name === 'shader'), 'CPU phases: ' + JSON.stringify(phases));
      console.log(`cpu: ${steps.length} steps, shader ${steps.map((s) => s.args.shader_ms.toFixed(3)).join(' ')} ms`);
    } finally {
      check((await srv.stop()) === 0, 'cpu server exit code');
    }
  }

  // ---- 2. Vulkan ----
  if (!vulkanDevice()) {
    console.log('no Vulkan device: the Vulkan part is not run');
    return;
  }
  const prompts = ['alpha beta', 'a longer prompt of a few more words here', 'x', 'gamma delta epsilon zeta eta theta iota kappa'];
  const solo = [];
  const srv = await startServer(['--backend', 'vulkan', '--profile', '--deterministic', '--slots', '4',
                                 '--max-batch-tokens', '16']);
  try {
    const health = await getJson(srv.base + '/health');
    check(health.deterministic === true && health.batch_invariant === true, 'vulkan health: ' + JSON.stringify(health));
    const meta = (await getJson(srv.base + '/v1/models')).data[0].edgeseek;
    check(meta.instances[0].serial === true, 'vulkan instance should run serially: ' + JSON.stringify(meta));
    for (const p of prompts) solo.push((await complete(srv.base, p, 12)).choices[0].text);
    const together = await Promise.all(prompts.map((p) => complete(srv.base, p, 12)));
    for (let i = 0; i < prompts.length; ++i)
      check(together[i].choices[0].text === solo[i], `vulkan request ${i} changed under load: ${JSON.stringify(together[i].choices[0].text)} vs ${JSON.stringify(solo[i])}`);
    const { steps } = await traceOf(srv.base, together[1].id);
    check(steps.length > 0, 'no steps in the vulkan trace');
    for (const s of steps) {
      const a = s.args;
      check(a.batch_seqs === 1, 'deterministic vulkan step with several sequences: ' + JSON.stringify(a));
      check(a.upload_ms > 0 && a.shader_ms > 0 && a.download_ms > 0, 'vulkan split incomplete: ' + JSON.stringify(a));
    }
    const a = steps[steps.length - 1].args;
    console.log(`vulkan: ${steps.length} steps; last: upload ${a.upload_ms.toFixed(3)} dispatch ${a.dispatch_ms.toFixed(3)} ` +
                `shader ${a.shader_ms.toFixed(3)} download ${a.download_ms.toFixed(3)} ms`);
  } finally {
    check((await srv.stop()) === 0, 'vulkan server exit code');
  }
});
