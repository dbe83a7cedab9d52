// The web page at / of `edgeseek serve`, in headless Chromium (Debian's chromium, driven by the
// playwright-core npm package): its headers (Content-Type, caching, Content-Security-Policy),
// a chat streamed from the tiny model, reasoning shown apart and folded/unfolded, hostile model
// output shown as text (never markup), the live view filling from /metrics, and screenshots
// checked region by region (pixel statistics, no golden image) — without and with an API key.
// Skipped (exit 77) only when chromium is not installed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { check, main, startServer, tempFile, waitFor } from './lib.mjs';
import { decodePng, regionStats } from './png.mjs';

const chromiumPath = process.env.ES_CHROMIUM || ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p));
if (!chromiumPath) {
  console.log("SKIP: the web page test needs Debian's chromium (/usr/bin/chromium; scripts/setup.sh installs it)");
  process.exit(77);
}
const { chromium } = await import('playwright-core');
const shotDir = process.env.ES_BINARY_DIR ? path.join(process.env.ES_BINARY_DIR, 'web_test_screenshots')
                                          : fs.mkdtempSync(path.join(os.tmpdir(), 'es-web-'));
fs.mkdirSync(shotDir, { recursive: true });

// ---- the page's HTTP answers ----
async function checkHeaders(base) {
  const r = await fetch(base + '/');
  check(r.status === 200, `/ answered ${r.status}`);
  check(r.headers.get('content-type') === 'text/html; charset=utf-8', 'content-type of / ' + r.headers.get('content-type'));
  const csp = r.headers.get('content-security-policy') || '';
  for (const d of ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"])
    check(csp.includes(d), `CSP lacks ${d}: ${csp}`);
  check(!/unsafe-inline|unsafe-eval|\*/.test(csp), 'CSP too wide: ' + csp);
  check(r.headers.get('x-content-type-options') === 'nosniff', 'nosniff');
  check(r.headers.get('cache-control') === 'no-cache', 'cache-control ' + r.headers.get('cache-control'));
  const etag = r.headers.get('etag');
  check(/^"[0-9a-f]{32}"$/.test(etag || ''), 'etag ' + etag);
  const html = await r.text();
  check(html.includes('<script src="/web/app.js"') && !/<script>|style="|https?:\/\//.test(html.replace(/<!--[\s\S]*?-->/g, '')),
        'the page must load only its own files, with no inline script or style');
  const again = await fetch(base + '/', { headers: { 'If-None-Match': etag } });
  check(again.status === 304 && (await again.text()) === '', 'revalidation answered ' + again.status);
  const types = { '/web/app.js': 'text/javascript; charset=utf-8', '/web/app.css': 'text/css; charset=utf-8', '/web/icon.svg': 'image/svg+xml' };
  for (const [p, t] of Object.entries(types)) {
    const a = await fetch(base + p);
    check(a.status === 200 && a.headers.get('content-type') === t, `${p}: ${a.status} ${a.headers.get('content-type')}`);
    check(a.headers.get('content-security-policy') === csp, p + ' CSP');
    await a.arrayBuffer();
  }
  for (const p of ['/web/nope.js', '/web/', '/index.htm', '/web/app.js/x']) {
    const a = await fetch(base + p);
    const j = await a.json();
    check(a.status === 404 && j.error && j.error.code === 'not_found', `${p} answered ${a.status}`);
  }
  const post = await fetch(base + '/', { method: 'POST', body: 'x', headers: { 'Content-Type': 'text/plain' } });
  check(post.status === 405 && post.headers.get('allow') === 'GET, HEAD', 'POST / answered ' + post.status);
  await post.arrayBuffer();
  const head = await fetch(base + '/web/app.js', { method: 'HEAD' });
  check(head.status === 200 && (await head.text()) === '', 'HEAD ' + head.status);
}

// ---- the browser ----
async function openPage(browser, base) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 860 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    // The 401s the page answers with the key dialog are logged by Chromium as failed loads.
    if (m.type() === 'error' && !/status of 401/.test(m.text())) problems.push('console: ' + m.text());
  });
  const requests = [];
  page.on('request', (q) => requests.push({ url: q.url(), auth: q.headers().authorization || '' }));
  await page.goto(base + '/');
  return { page, problems, requests };
}

const samples = (page) => page.evaluate(() => Number(document.getElementById('live').dataset.samples));

// Sends `text` from the composer; resolves when the reply has finished streaming.
async function chat(page, text) {
  const n = await page.locator('.msg.assistant').count();
  await page.evaluate(() => {
    // Counts the reply's renders: a streamed answer is drawn more than once.
    window.__renders = 0;
    new MutationObserver((ms) => {
      for (const m of ms) if (m.target.classList && m.target.classList.contains('content')) window.__renders++;
    }).observe(document.getElementById('log'), { childList: true, subtree: true });
  });
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
  await page.waitForFunction((i) => {
    const m = document.querySelectorAll('.msg.assistant')[i];
    return m && m.dataset.state && m.dataset.state !== 'streaming';
  }, n, { timeout: 60000 });
  return page.evaluate((i) => {
    const m = document.querySelectorAll('.msg.assistant')[i];
    return { state: m.dataset.state, content: m.querySelector('.content').textContent,
             meta: m.querySelector('.meta').textContent, renders: window.__renders };
  }, n);
}

async function screenshot(page, name) {
  const file = path.join(shotDir, name + '.png');
  const img = decodePng(await page.screenshot({ path: file }));
  const box = async (sel) => page.locator(sel).boundingBox();
  console.log('screenshot', file);
  return { img, box, stats: async (sel) => regionStats(img, await box(sel)) };
}

// A streamed reply the test writes itself (page.route), for what the tiny model cannot be made
// to say: reasoning, and output that is markup.
function cannedStream(deltas) {
  const chunk = (delta, finish = null) => 'data: ' + JSON.stringify({
    id: 'chatcmpl-test', object: 'chat.completion.chunk', created: 0, model: 'tiny',
    choices: [{ index: 0, delta, finish_reason: finish }] }) + '\n\n';
  return deltas.map((d) => chunk(d)).join('') + chunk({}, 'stop') + 'data: [DONE]\n\n';
}

async function checkChatAndLive(page, label) {
  await page.waitForFunction(() => document.querySelector('#model option[value="tiny"]'), null, { timeout: 20000 });
  await page.fill('#max_tokens', '40');
  await page.fill('#temperature', '0');
  const before = await screenshot(page, label + '-empty');
  const emptyLog = await before.stats('#log');
  check(emptyLog.nonBackground < 0.002, `${label}: the empty chat log should be blank: ${JSON.stringify(emptyLog)}`);

  const s0 = await samples(page);
  const r = await chat(page, 'Hello there, tiny model');
  check(r.state === 'done', `${label}: reply ended as ${r.state}: ${r.meta}`);
  check(r.content.length > 0, `${label}: empty reply (${r.meta})`);
  check(/^finish: (stop|length) · \d+ tokens/.test(r.meta), `${label}: meta '${r.meta}'`);
  console.log(`${label}: reply of ${r.content.length} chars in ${r.renders} renders: ${r.meta}`);

  // The live view: new samples after the reply, the tokens it generated seen as a rate, the KV
  // pool's blocks in the legend.
  await waitFor(async () => (await samples(page)) >= s0 + 3, 'live samples', 15000);
  const peak = await page.evaluate(() => Math.max(...live.tps));
  check(peak > 0, `${label}: tokens/s never rose above 0 in the live view`);
  const kvLegend = await page.textContent('#legend-kv');
  const free = Number((kvLegend.match(/free (\d+)/) || [])[1]);
  check(free > 0, `${label}: KV legend '${kvLegend}'`);
  check(/\d/.test(await page.textContent('#card-running')), 'running card');

  const shot = await screenshot(page, label + '-chat');
  const whole = regionStats(shot.img, { x: 0, y: 0, width: shot.img.width, height: shot.img.height });
  check(whole.std > 10 && whole.colors > 50, `${label}: the screenshot looks blank: ${JSON.stringify(whole)}`);
  const log = await shot.stats('#log');
  check(log.nonBackground > 0.01 && log.std > 5, `${label}: the chat log shows no messages: ${JSON.stringify(log)}`);
  for (const sel of ['header', '#settings', '#cards']) {
    const st = await shot.stats(sel);
    check(st.std > 5 && st.colors > 8, `${label}: ${sel} is blank: ${JSON.stringify(st)}`);
  }
  const tps = await shot.stats('#plot-tps');
  check(tps.colored > 0.002, `${label}: the tokens/s plot draws nothing: ${JSON.stringify(tps)}`);
  // The plot fills from the right, one column per sample: its newest columns hold the pool.
  const kb = await shot.box('#plot-kv');
  const kv = regionStats(shot.img, { x: kb.x + kb.width * 0.985, y: kb.y + 4, width: kb.width * 0.01, height: kb.height - 8 });
  check(kv.colored > 0.15, `${label}: the KV plot is not filled with the pool's blocks: ${JSON.stringify(kv)}`);
}

async function checkReasoningAndHostile(page) {
  const hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b> &amp;';
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'Content-Type': 'text/event-stream' },
    body: cannedStream([{ role: 'assistant', content: '' }, { reasoning_content: 'First, ' }, { reasoning_content: 'think <i>hard</i>.' },
                        { content: '\n\nAnswer: ' }, { content: hostile }]),
  }));
  let r = await chat(page, 'reason please');
  check(r.state === 'done' && r.content === 'Answer: ' + hostile, 'hostile content shown as text: ' + JSON.stringify(r.content));
  const last = page.locator('.msg.assistant').last();
  const details = last.locator('details.reasoning');
  check(await details.isVisible(), 'the reasoning block is shown');
  check(await last.locator('.reasoning-body').textContent() === 'First, think <i>hard</i>.', 'reasoning text');
  check(!(await details.evaluate((d) => d.open)), 'the reasoning folds once the answer came');
  check(!(await last.locator('.reasoning-body').isVisible()), 'folded reasoning is hidden');
  await details.locator('summary').click();
  check(await details.evaluate((d) => d.open) && await last.locator('.reasoning-body').isVisible(), 'reasoning opens');
  const open = await screenshot(page, 'reasoning-open');
  const body = await open.stats('.msg.assistant:last-child .reasoning-body');
  check(body.nonBackground > 0.02, 'the open reasoning shows text: ' + JSON.stringify(body));
  await details.locator('summary').click();
  check(!(await details.evaluate((d) => d.open)), 'reasoning closes');

  // R1's own <think> in the content (the server's split off): parsed by the page.
  await page.unroute('**/v1/chat/completions');
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'Content-Type': 'text/event-stream' },
    body: cannedStream([{ content: '<think>plan <script>window.__pwned=3</script>' }, { content: '</think>\n\nDone <u>x</u>' }]),
  }));
  r = await chat(page, 'think inline');
  check(r.content === 'Done <u>x</u>', 'content after </think>: ' + JSON.stringify(r.content));
  check(await page.locator('.msg.assistant').last().locator('.reasoning-body').textContent() === 'plan <script>window.__pwned=3</script>',
        'reasoning from <think>');
  await page.unroute('**/v1/chat/completions');
  const dom = await page.evaluate(() => ({
    pwned: window.__pwned, elems: document.querySelectorAll('#log img, #log script, #log b, #log i, #log u').length }));
  check(dom.pwned === undefined && dom.elems === 0, 'model output became markup: ' + JSON.stringify(dom));
}

main(async () => {
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  try {
    // ---- no API key ----
    let srv = await startServer();
    try {
      await checkHeaders(srv.base);
      const { page, problems } = await openPage(browser, srv.base);
      await checkChatAndLive(page, 'open');
      await checkReasoningAndHostile(page);
      check(problems.length === 0, 'page problems: ' + problems.join('; '));
      await page.close();
    } finally {
      await srv.stop();
    }

    // ---- with API keys: / is public, the APIs are not; the page asks and sends the key ----
    const key = 'web-test-key-' + process.pid;
    const keyFile = tempFile('keys.txt', key + '\n');
    srv = await startServer(['--api-key-file', keyFile]);
    try {
      check((await fetch(srv.base + '/')).status === 200, '/ is public');
      for (const p of ['/v1/models', '/metrics']) check((await fetch(srv.base + p)).status === 401, p + ' needs the key');
      const { page, problems, requests } = await openPage(browser, srv.base);
      await page.waitForSelector('#key-dialog[open]', { timeout: 10000 });
      check(/missing API key/.test(await page.textContent('#key-reason')), 'dialog reason');
      await page.fill('#key-input', 'wrong-key');
      await page.click('#key-save');
      await page.waitForFunction(() => document.getElementById('key-dialog').open &&
                                       /invalid API key/.test(document.getElementById('key-reason').textContent), null, { timeout: 10000 });
      await screenshot(page, 'key-dialog');
      await page.fill('#key-input', key);
      await page.press('#key-input', 'Enter');
      check(!(await page.evaluate(() => document.getElementById('key-dialog').open)), 'dialog closed');
      await checkChatAndLive(page, 'key');
      const sent = requests.filter((q) => /\/v1\/chat\/completions$|\/metrics$/.test(q.url));
      check(sent.length > 0 && sent.some((q) => q.auth === 'Bearer ' + key), 'the key is sent as a Bearer token');
      check(problems.length === 0, 'page problems: ' + problems.join('; '));
      await page.close();
    } finally {
      await srv.stop();
      fs.rmSync(path.dirname(keyFile), { recursive: true, force: true });
    }
  } finally {
    await browser.close();
  }
});
