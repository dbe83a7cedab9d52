// More long requests than HTTP threads: every request is served or refused with an OpenAI error
// (503 server_busy, Retry-After, Connection: close), never left unread; /metrics and a
// high-priority request still get through while low-priority ones fill the server.
//
// Each request in flight holds one of the http_threads (cpp-httplib serves a connection per
// thread). Before the in-flight cap, 12 keep-alive clients on 8 threads left 4 connections, and
// every later one (/metrics, the probe), accepted but never read: clients saw timeouts and, as
// they gave up, "socket hang up". The checks read /metrics state, not timing ratios.
//
// Every connection the test opens carries one request. An idle keep-alive connection also holds
// a thread (up to the 5 s keep-alive timeout) and is no request, so the cap cannot count it: with
// the load on pooled keep-alive sockets, and /health, /metrics and the probe on keep-alive
// sockets of their own, up to 4 of the 8 threads sat on idle sockets, the requests in flight
// stayed under the cap of 6, nothing was refused, and the test failed about one run in three.
import http from 'node:http';
import OpenAI from 'openai';
import { check, main, metricValue, startServer, tempFile } from './lib.mjs';

const kThreads = 8;
const kLoops = 12;
const config = {
  http_threads: kThreads,
  priorities: [
    { name: 'high', weight: 16 },
    { name: 'low', weight: 1 },
  ],
  default_priority: 'low',
  limits: { max_concurrent_per_client: 64 },
};

// GET on a connection of its own, closed after the answer: { status, headers, body }, or null
// when no answer came within timeoutMs (the connection was accepted but not read). keepAlive asks
// for a keep-alive connection (to read the server's Keep-Alive header), closed all the same.
function getOnce(url, timeoutMs, keepAlive = false) {
  const agent = new http.Agent({ keepAlive });
  const done = new Promise((resolve) => {
    const req = http.get(url, { agent, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
      res.on('error', () => resolve(null));
    });
    req.on('timeout', () => { req.destroy(); resolve(null); });
    req.on('error', () => resolve(null));
  });
  return done.finally(() => agent.destroy());
}

// /metrics within 5 s, or null.
async function metricsWithin(base) {
  const r = await getOnce(base + '/metrics', 5000);
  return r && r.status === 200 ? r.body : null;
}

main(async () => {
  const srv = await startServer(['--slots', '2', '--config', tempFile('overload.json', JSON.stringify(config))]);
  let stop = false;
  let load = [];
  try {
    // Keep-alive: the server must keep an idle connection longer than the openai client's agent
    // (agentkeepalive: 4 s free-socket timeout) keeps an idle socket; at 2 s, reusing a socket
    // idle for ~2 s raced the server's close: 3-8 ECONNRESET ("socket hang up") in 500 reuses.
    const health = await getOnce(srv.base + '/health', 5000, true);
    const ka = (health && health.headers['keep-alive']) || '';
    const kaTimeout = Number((/timeout=(\d+)/.exec(ka) || [])[1]);
    check(kaTimeout * 1000 > 4000, `Keep-Alive '${ka}': the server closes idle connections before clients stop reusing them`);

    const c = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'x', maxRetries: 0, timeout: 30000,
                           httpAgent: new http.Agent({ keepAlive: false }) });
    let served = 0;
    let refused = 0;
    const failures = [];
    load = Array.from({ length: kLoops }, async () => {
      while (!stop) {
        try {
          await c.completions.create({ model: 'tiny', prompt: 'long work', max_tokens: 900, ignore_eos: true });
          ++served;
        } catch (e) {
          if (e.status === 503 && e.error && e.error.code === 'server_busy') {
            ++refused;
            await new Promise((r) => setTimeout(r, 200));  // as Retry-After asks, but shorter
          } else {
            failures.push(`${e.status || ''} ${e.cause?.code || e.code || ''} ${e.message}`);
            await new Promise((r) => setTimeout(r, 200));
          }
        }
      }
    });
    await new Promise((r) => setTimeout(r, 1500));

    let sawFull = false;
    for (let i = 0; i < 3; ++i) {
      const m = await metricsWithin(srv.base);
      check(m !== null, `/metrics was not answered within 5 s with ${kLoops} long requests on ${kThreads} HTTP threads`);
      const inFlight = metricValue(m, 'edgeseek_requests_in_flight');
      const waiting = metricValue(m, 'edgeseek_waiting_sequences');
      console.log(`in flight ${inFlight}, waiting ${waiting}, running ${metricValue(m, 'edgeseek_running_sequences')}`);
      check(inFlight <= kThreads - 1, `${inFlight} requests in flight leave no HTTP thread for new connections`);
      sawFull ||= waiting > 0;
      const t0 = performance.now();
      const r = await c.completions.create({ model: 'tiny', prompt: 'probe', max_tokens: 4, ignore_eos: true, priority: 'high' });
      check(r.usage.completion_tokens === 4, 'high-priority probe output');
      console.log(`high-priority probe served in ${(performance.now() - t0).toFixed(0)} ms`);
    }
    stop = true;
    await Promise.all(load);
    const m = await metricsWithin(srv.base);
    console.log(`served ${served}, refused ${refused} (503 server_busy), failures ${failures.length}`);
    check(failures.length === 0, 'requests failed other than with 503 server_busy: ' + failures.slice(0, 5).join('; '));
    check(sawFull, 'the queue never had a request waiting: the load did not saturate the slots');
    check(refused > 0, 'no request was refused: the load did not reach the in-flight cap');
    check(served > 0, 'no low-priority request was served');
    check(metricValue(m, 'edgeseek_requests_total', { endpoint: 'completions', status: '503' }) === refused,
          'every refusal is counted as a 503');
  } finally {
    stop = true;
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
});
