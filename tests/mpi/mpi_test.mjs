// The layer split over MPI ranks on localhost (issue 22; docs/scale.md): `mpirun -np 2` and
// `-np 3` against the single process, for
//   - logits of a dense and an MLA+MoE golden (3 layers each: one or more per rank), bit for bit
//     (every rank computes on the CPU in f32, the rows cross as f32), and a 200-row prompt that
//     the ranks compute as micro-batches side by side;
//   - a served chat (/v1/chat/completions, greedy) of the tiny synthetic model at 3 layers: the
//     same text, from rank 0's HTTP front end;
//   - a rank killed while a request runs: that request answers 503, the server drains and the
//     whole job ends within a bound, with exit code 3 (rank 0: "an MPI rank ... was lost").
// mpirun gets --enable-recovery there: without it Open MPI ends every rank (rank 0 included) as
// soon as one dies, so there is no front end left to answer.
import { spawn, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { check, cli, main, root, tinyConfig, tinyTokenizer } from '../server/lib.mjs';

const asRoot = process.getuid && process.getuid() === 0;
// In containers that forbid ptrace between processes, Open MPI's shared-memory transport fails its
// single-copy (CMA) reads; copying through the shared buffer works everywhere.
process.env.OMPI_MCA_btl_vader_single_copy_mechanism = 'none';
const mpirunArgs = (n, extra = []) => [
  ...(asRoot ? ['--allow-run-as-root'] : []),
  '--oversubscribe',
  '--bind-to',
  'none',
  ...extra,
  '-np',
  String(n),
];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'es-mpi-'));
const golden = (m) => path.join(root, 'tests/golden/data/models', m);

function logits(model, np, ids = '1,5,9,33,2,7,4', tag = '') {
  const out = path.join(tmp, `${path.basename(model)}_${np}${tag}.f32`);
  const args = ['logits', '-m', model, '--ids', ids, '--out', out, '-t', '1'];
  if (np === 1) execFileSync(cli, args, { stdio: 'inherit' });
  else execFileSync('mpirun', [...mpirunArgs(np), cli, ...args], { stdio: 'inherit', timeout: 60000 });
  return fs.readFileSync(out);
}

// A 3-layer version of the server tests' tiny model: three ranks need a layer each.
const config = path.join(tmp, 'tiny3.json');
fs.writeFileSync(config, JSON.stringify({ ...JSON.parse(fs.readFileSync(tinyConfig)), num_hidden_layers: 3 }));

function serve(np, extra = []) {
  const args = ['serve', '--port', '0', '--synthetic', config, '--tokenizer', tinyTokenizer, '--alias', 'tiny', '-t', '1'];
  const proc =
    np === 1 ? spawn(cli, args, { stdio: ['ignore', 'inherit', 'pipe'] })
             : spawn('mpirun', [...mpirunArgs(np, extra), cli, ...args], { stdio: ['ignore', 'inherit', 'pipe'] });
  let err = '';
  const exited = once(proc, 'exit');
  const port = new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      err += d.toString();
      process.stderr.write(d);
      const m = err.match(/ready/) && err.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code} before ready:\n${err}`)));
  });
  return { proc, port, exited, stderr: () => err };
}

async function chat(port, maxTokens = 12) {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hello there' }], max_tokens: maxTokens, temperature: 0 }),
  });
  return { status: r.status, body: await r.json() };
}

// The pid of rank `rank` among mpirun's children.
function rankPid(mpirunPid, rank) {
  const kids = execFileSync('pgrep', ['-P', String(mpirunPid)]).toString().trim().split('\n');
  for (const k of kids) {
    const env = fs.readFileSync(`/proc/${k}/environ`, 'latin1').split('\0');
    if (env.includes(`OMPI_COMM_WORLD_RANK=${rank}`)) return Number(k);
  }
  throw new Error(`no rank ${rank} among mpirun's children ${kids}`);
}

main(async () => {
  // ---- logits ----
  for (const m of ['qwen2_sharded', 'dsv3']) {
    const one = logits(golden(m), 1);
    for (const np of [2, 3]) check(one.equals(logits(golden(m), np)), `${m}: logits under mpirun -np ${np} differ`);
  }
  // 200 rows: the ranks compute 3 micro-batches side by side (runtime/micro_batch.h).
  const longIds = Array.from({ length: 200 }, (_, i) => 1 + ((i * 7) % 300)).join(',');
  const oneLong = logits(golden('qwen2_sharded'), 1, longIds, '_long');
  for (const np of [2, 3])
    check(oneLong.equals(logits(golden('qwen2_sharded'), np, longIds, '_long')),
          `qwen2_sharded: 200-row logits under mpirun -np ${np} differ`);

  // ---- a served chat ----
  const single = serve(1);
  const ref = await chat(await single.port);
  check(ref.status === 200, `single process: ${JSON.stringify(ref.body)}`);
  single.proc.kill('SIGTERM');
  await single.exited;
  for (const np of [2, 3]) {
    const s = serve(np);
    const got = await chat(await s.port);
    check(got.status === 200, `-np ${np}: ${JSON.stringify(got.body)}`);
    check(got.body.choices[0].message.content === ref.body.choices[0].message.content,
          `-np ${np}: '${got.body.choices[0].message.content}' vs '${ref.body.choices[0].message.content}'`);
    // mpirun forwards SIGTERM to every rank (and itself ends with 1 on a signal): rank 0 drains,
    // then releases the workers, which ignore the signal.
    s.proc.kill('SIGTERM');
    await s.exited;
    check(/drained, exiting/.test(s.stderr()) && !/error|lost/.test(s.stderr()),
          `-np ${np}: no clean drain after SIGTERM:\n${s.stderr()}`);
  }

  // ---- a rank dies ----
  const s = serve(2, ['--enable-recovery']);
  const port = await s.port;
  // A long request, the rank killed while it runs (the tiny model decodes ~1000 tokens/s).
  const pending = chat(port, 900);
  await new Promise((r) => setTimeout(r, 150));
  const t0 = Date.now();
  process.kill(rankPid(s.proc.pid, 1), 'SIGKILL');
  const r = await pending;
  const answerMs = Date.now() - t0;
  check(r.status === 503, `after a rank died: ${r.status} ${JSON.stringify(r.body)}`);
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), 20000);
  await s.exited;
  clearTimeout(timer);
  const exitMs = Date.now() - t0;
  console.log(`rank killed: 503 after ${answerMs} ms, job ended after ${exitMs} ms`);
  check(answerMs < 10000, `503 came after ${answerMs} ms`);
  check(exitMs < 15000, `the job ended ${exitMs} ms after the kill`);
  check(/an MPI rank of the layer split was lost/.test(s.stderr()), 'rank 0 did not say a rank was lost');
});
