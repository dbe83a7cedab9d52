// The web page's program (index.html): a chat streamed from the server's OpenAI-compatible
// /v1/chat/completions, reasoning shown apart and collapsible, sampling settings, and a live view
// of the server polled from /metrics and drawn on canvases.
//
// Model output, error messages and every name the server sends are untrusted text: they reach
// the page only through textContent (never innerHTML), so a model that writes markup shows it.
'use strict';

// ==== state ===================================================================================
const $ = (id) => document.getElementById(id);
const kKeyStore = 'edgeseek-api-key';        // sessionStorage: gone when the tab closes
const kSettingsStore = 'edgeseek-settings';  // localStorage: sampling settings, no secrets
const state = {
  key: sessionStorage.getItem(kKeyStore) || '',
  history: [],   // OpenAI messages of this chat (user and assistant turns, no reasoning)
  abort: null,   // the AbortController of the reply being streamed
  asked: false,  // the key dialog was shown since the last key was given
};

class AuthError extends Error {}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// ==== API =====================================================================================
// fetch with the API key; a 401 opens the key dialog and throws AuthError.
async function api(path, init = {}) {
  const headers = new Headers(init.headers || {});
  if (state.key) headers.set('Authorization', 'Bearer ' + state.key);
  const r = await fetch(path, { ...init, headers, cache: 'no-store' });
  if (r.status === 401) {
    const why = await errorMessage(r);
    if (!state.asked) askKey(why);  // once until a key is given: polling must not nag
    throw new AuthError('API key needed');
  }
  return r;
}

async function errorMessage(r) {
  try {
    const j = await r.json();
    if (j && j.error && typeof j.error.message === 'string') return j.error.message;
  } catch (e) {
    // not JSON
  }
  return `HTTP ${r.status}`;
}

// ---- the key dialog ----
function askKey(reason) {
  const d = $('key-dialog');
  state.asked = true;
  $('key-reason').textContent = reason ? 'The server answered: ' + reason : 'Key for this server:';
  if (!d.open) {
    $('key-input').value = state.key;
    d.showModal();
    $('key-input').focus();
  }
}

function saveKey() {
  state.key = $('key-input').value.trim();
  if (state.key) sessionStorage.setItem(kKeyStore, state.key);
  else sessionStorage.removeItem(kKeyStore);
  $('key-dialog').close();
  state.asked = false;
  loadModels();
  pollMetrics();
}

// ---- models ----
async function loadModels() {
  try {
    const r = await api('/v1/models');
    if (!r.ok) throw new Error(await errorMessage(r));
    const j = await r.json();
    const sel = $('model');
    const before = sel.value;
    sel.replaceChildren();
    for (const m of j.data || []) {
      const o = el('option', '', String(m.id));
      o.value = String(m.id);
      sel.append(o);
    }
    if ([...sel.options].some((o) => o.value === before)) sel.value = before;
    if (!sel.options.length) setTimeout(loadModels, 1000);  // still loading
  } catch (e) {
    if (!(e instanceof AuthError)) setTimeout(loadModels, 2000);
  }
}

// ==== chat ====================================================================================
// One message on the log: {root, details, reasoning, content, tools, meta}.
function addMessage(role, text) {
  const root = el('div', 'msg ' + role);
  const m = { root };
  if (role === 'assistant') {
    m.details = el('details', 'reasoning');
    m.details.hidden = true;
    m.details.append(el('summary', '', 'Reasoning'));
    m.reasoning = el('div', 'reasoning-body');
    m.details.append(m.reasoning);
    root.append(m.details);
  }
  m.content = el('div', 'content', text || '');
  m.tools = el('div', 'tools');
  m.meta = el('div', 'meta');
  root.append(m.content, m.tools, m.meta);
  $('log').append(root);
  scrollLog();
  return m;
}

function scrollLog() {
  const log = $('log');
  log.scrollTop = log.scrollHeight;
}

// R1's <think>…</think> when the server leaves it in the content (its reasoning split off):
// the text before </think> is reasoning (the template may have opened the block itself).
function splitThink(raw) {
  const open = raw.indexOf('<think>');
  const close = raw.indexOf('</think>');
  if (open < 0 && close < 0) return { reasoning: '', content: raw };
  const from = open < 0 ? 0 : open + 7;
  if (close < 0) return { reasoning: raw.slice(from), content: open < 0 ? '' : raw.slice(0, open) };
  return { reasoning: raw.slice(from, close), content: (open < 0 ? '' : raw.slice(0, open)) + raw.slice(close + 8) };
}

// Server-sent events of a fetch body: yields each event's data.
async function* sseData(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield data;
    }
  }
}

function settings() {
  const num = (id) => {
    const v = $(id).value.trim();
    return v === '' ? undefined : Number(v);
  };
  return { system: $('system').value, temperature: num('temperature'), top_p: num('top_p'), max_tokens: num('max_tokens') };
}

function saveSettings() {
  localStorage.setItem(kSettingsStore, JSON.stringify(settings()));
}

function restoreSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(kSettingsStore) || '{}');
    if (typeof s.system === 'string') $('system').value = s.system;
    for (const k of ['temperature', 'top_p', 'max_tokens'])
      if (typeof s[k] === 'number' && Number.isFinite(s[k])) $(k).value = String(s[k]);
  } catch (e) {
    // nothing stored
  }
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

async function send() {
  const text = $('prompt').value;
  if (!text.trim() || state.abort) return;
  $('prompt').value = '';
  addMessage('user', text);
  state.history.push({ role: 'user', content: text });
  const s = settings();
  const messages = (s.system.trim() ? [{ role: 'system', content: s.system }] : []).concat(state.history);
  const body = { model: $('model').value || undefined, messages, stream: true, stream_options: { include_usage: true } };
  for (const k of ['temperature', 'top_p', 'max_tokens']) if (s[k] !== undefined && Number.isFinite(s[k])) body[k] = s[k];

  const m = addMessage('assistant');
  m.root.dataset.state = 'streaming';
  const reply = { reasoning: '', raw: '', tools: [], finish: null, usage: null };
  const t0 = performance.now();
  let tFirst = 0;
  state.abort = new AbortController();
  setBusy(true);
  let userToggled = false;
  m.details.addEventListener('toggle', () => { userToggled = m.details.dataset.auto !== '1'; m.details.dataset.auto = ''; });
  const render = () => {
    const t = splitThink(reply.raw);
    const reasoning = reply.reasoning + t.reasoning;
    if (reasoning) {
      m.details.hidden = false;
      m.reasoning.textContent = reasoning;
      // Open while the model thinks, folded once the answer starts, unless the user chose.
      const want = t.content.trim() === '' && reply.tools.length === 0;
      if (!userToggled && m.details.open !== want) {
        m.details.dataset.auto = '1';
        m.details.open = want;
      }
    }
    m.content.textContent = reasoning ? t.content.replace(/^\s+/, '') : t.content;
    m.tools.replaceChildren(...reply.tools.map((c) => el('div', 'tool', `${c.name}(${c.args})`)));
    scrollLog();
  };
  try {
    const r = await api('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal: state.abort.signal,
    });
    if (!r.ok) throw new Error(await errorMessage(r));
    for await (const data of sseData(r.body)) {
      if (data === '[DONE]') break;
      const j = JSON.parse(data);
      if (j.error) throw new Error(String(j.error.message));
      if (j.usage) reply.usage = j.usage;
      const c = (j.choices || [])[0];
      if (!c) continue;
      const d = c.delta || {};
      if (!tFirst && (d.content || d.reasoning_content || d.tool_calls)) tFirst = performance.now();
      if (typeof d.reasoning_content === 'string') reply.reasoning += d.reasoning_content;
      if (typeof d.content === 'string') reply.raw += d.content;
      for (const tc of d.tool_calls || []) {
        const i = Number(tc.index) || 0;
        reply.tools[i] = reply.tools[i] || { name: '', args: '' };
        if (tc.function && typeof tc.function.name === 'string') reply.tools[i].name += tc.function.name;
        if (tc.function && typeof tc.function.arguments === 'string') reply.tools[i].args += tc.function.arguments;
      }
      if (c.finish_reason) reply.finish = c.finish_reason;
      render();
    }
    const secs = (performance.now() - (tFirst || t0)) / 1000;
    const n = reply.usage ? reply.usage.completion_tokens : null;
    const parts = [`finish: ${reply.finish || '?'}`];
    if (n !== null) parts.push(`${n} tokens`, `${(n / Math.max(secs, 1e-3)).toFixed(1)} tokens/s`);
    if (tFirst) parts.push(`first token ${((tFirst - t0) / 1000).toFixed(2)} s`);
    m.meta.textContent = parts.join(' · ');
    m.root.dataset.state = 'done';
    const answer = { role: 'assistant', content: splitThink(reply.raw).content };
    state.history.push(answer);
  } catch (e) {
    m.meta.classList.add('error');
    m.meta.textContent = e.name === 'AbortError' ? 'stopped' : e instanceof AuthError ? 'an API key is needed' : 'error: ' + e.message;
    m.root.dataset.state = e.name === 'AbortError' ? 'stopped' : 'error';
    state.history.pop();  // the turn did not happen
  } finally {
    state.abort = null;
    setBusy(false);
    render();
  }
}

// ==== live view ===============================================================================
// Prometheus text → [{name, labels, value}] (the exposition format's sample lines).
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function total(samples, name) {
  let s = 0;
  for (const x of samples) if (x.name === name) s += x.value;
  return s;
}

// Sums of a metric by one label's values, in order of first appearance.
function byLabel(samples, name, label) {
  const out = new Map();
  for (const x of samples)
    if (x.name === name) out.set(x.labels[label] ?? '', (out.get(x.labels[label] ?? '') || 0) + x.value);
  return out;
}

const kHistory = 120;  // samples kept (one a second)
const kColors = ['#1f6feb', '#e5534b', '#2da44e', '#bf8700', '#8250df', '#0598bc', '#cf222e', '#57606a'];
const live = { t: [], tps: [], queue: new Map(), kv: new Map(), split: new Map(), prev: null, samples: 0 };

function push(map, key, value) {
  if (!map.has(key)) map.set(key, Array(live.t.length - 1).fill(0));
  map.get(key).push(value);
}

function trim(a) {
  while (a.length > kHistory) a.shift();
}

async function pollMetrics() {
  clearTimeout(pollMetrics.timer);
  pollMetrics.timer = setTimeout(pollMetrics, 1000);
  let text;
  try {
    const r = await api('/metrics');
    if (!r.ok) throw new Error(await errorMessage(r));
    text = await r.text();
    $('live-error').textContent = '';
  } catch (e) {
    $('live-error').textContent = e instanceof AuthError ? 'an API key is needed for /metrics' : 'metrics: ' + e.message;
    return;
  }
  const s = parseMetrics(text);
  const now = performance.now() / 1000;
  const cur = {
    t: now,
    tokens: total(s, 'edgeseek_client_generation_tokens_total'),
    steps: total(s, 'edgeseek_step_seconds_count'),
    stepSecs: total(s, 'edgeseek_step_seconds_sum'),
    phases: byLabel(s, 'edgeseek_backend_seconds_total', 'phase'),
  };
  const prev = live.prev;
  live.prev = cur;
  $('server-state').textContent = total(s, 'edgeseek_ready') > 0 ? 'ready' : 'loading';
  $('server-state').className = 'pill ' + (total(s, 'edgeseek_ready') > 0 ? 'ok' : 'bad');
  if (!prev) return;  // rates need two samples
  const dt = Math.max(cur.t - prev.t, 1e-3);
  const dsteps = cur.steps - prev.steps;
  live.t.push(cur.t);
  const tps = Math.max(0, (cur.tokens - prev.tokens) / dt);
  live.tps.push(tps);
  for (const [k, v] of byLabel(s, 'edgeseek_queue_length', 'priority')) push(live.queue, k, v);
  for (const st of ['used', 'cached', 'free']) push(live.kv, st, byLabel(s, 'edgeseek_kv_blocks', 'state').get(st) || 0);
  for (const ph of ['upload', 'dispatch', 'shader', 'download'])
    push(live.split, ph, dsteps > 0 ? (1000 * ((cur.phases.get(ph) || 0) - (prev.phases.get(ph) || 0))) / dsteps : 0);
  for (const a of [live.t, live.tps, ...live.queue.values(), ...live.kv.values(), ...live.split.values()]) trim(a);
  live.samples += 1;

  $('card-tps').textContent = tps.toFixed(1);
  $('card-running').textContent = String(total(s, 'edgeseek_running_sequences'));
  $('card-waiting').textContent = String(total(s, 'edgeseek_waiting_sequences'));
  $('card-step').textContent = dsteps > 0 ? ((1000 * (cur.stepSecs - prev.stepSecs)) / dsteps).toFixed(1) : '–';
  $('split-note').textContent = cur.phases.size
    ? ''
    : 'The split is measured with profiling on (scheduler.profile in the server config).';
  $('live').dataset.samples = String(live.samples);
  drawLive();
}

function drawLive() {
  plot($('plot-tps'), [{ name: 'tokens/s', values: live.tps }], { area: true });
  const series = (map) => [...map].map(([name, values]) => ({ name, values }));
  plot($('plot-queue'), series(live.queue), {});
  legend($('legend-queue'), series(live.queue));
  plot($('plot-kv'), series(live.kv), { stacked: true, colors: ['#e5534b', '#bf8700', '#2da44e'] });
  legend($('legend-kv'), series(live.kv), ['#e5534b', '#bf8700', '#2da44e']);
  plot($('plot-split'), series(live.split), { stacked: true });
  legend($('legend-split'), series(live.split));
}

function legend(div, series, colors = kColors) {
  div.replaceChildren(...series.map((s, i) => {
    const item = el('span');
    const sw = el('span', 'sw');
    sw.style.background = colors[i % colors.length];  // CSSOM, which the policy allows
    const last = s.values.length ? s.values[s.values.length - 1] : 0;
    item.append(sw, document.createTextNode(`${s.name} ${Number.isInteger(last) ? last : last.toFixed(2)}`));
    return item;
  }));
}

// A time-series plot: lines (or stacked areas) over the last kHistory samples, the y axis from
// 0 to a rounded maximum written in the corner.
function plot(canvas, series, { stacked = false, area = false, colors = kColors } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(canvas.clientWidth * dpr));
  const h = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== w || canvas.height !== h) {
    canvas.width = w;
    canvas.height = h;
  }
  const g = canvas.getContext('2d');
  g.clearRect(0, 0, w, h);
  const n = Math.max(0, ...series.map((s) => s.values.length));
  const base = new Array(n).fill(0);
  const tops = series.map((s) => {
    const t = [];
    for (let i = 0; i < n; ++i) {
      const v = s.values[i] || 0;
      t.push(stacked ? (base[i] += v) : v);
    }
    return t;
  });
  let max = 0;
  for (const t of tops) for (const v of t) max = Math.max(max, v);
  max = niceMax(max);
  const pad = 2 * dpr;
  const x = (i) => (n <= 1 ? w - pad : pad + ((w - 2 * pad) * (i + kHistory - n)) / (kHistory - 1));
  const y = (v) => h - pad - ((h - 2 * pad) * v) / max;
  g.strokeStyle = '#eef0f3';
  g.lineWidth = 1;
  for (let k = 1; k < 4; ++k) {
    g.beginPath();
    g.moveTo(0, (h * k) / 4);
    g.lineTo(w, (h * k) / 4);
    g.stroke();
  }
  for (let s = tops.length - 1; s >= 0 && n; --s) {
    const t = tops[s];
    const color = colors[s % colors.length];
    g.beginPath();
    g.moveTo(x(0), y(t[0]));
    for (let i = 1; i < n; ++i) g.lineTo(x(i), y(t[i]));
    if (stacked || area) {
      g.lineTo(x(n - 1), y(0));
      g.lineTo(x(0), y(0));
      g.closePath();
      g.fillStyle = color + (area ? '40' : 'c0');
      g.fill();
    }
    if (!stacked) {
      g.strokeStyle = color;
      g.lineWidth = 1.5 * dpr;
      g.stroke();
    }
  }
  g.fillStyle = '#66707b';
  g.font = `${10 * dpr}px system-ui, sans-serif`;
  g.textBaseline = 'top';
  g.fillText(String(max), pad + 2, pad);
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// ==== start ===================================================================================
function start() {
  restoreSettings();
  for (const id of ['system', 'temperature', 'top_p', 'max_tokens']) $(id).addEventListener('change', saveSettings);
  $('send').addEventListener('click', send);
  $('stop').addEventListener('click', () => state.abort && state.abort.abort());
  $('clear').addEventListener('click', () => {
    if (state.abort) state.abort.abort();
    state.history = [];
    $('log').replaceChildren();
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $('key-button').addEventListener('click', () => askKey(''));
  $('key-save').addEventListener('click', saveKey);
  $('key-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') saveKey();
  });
  $('key-cancel').addEventListener('click', () => $('key-dialog').close());
  window.addEventListener('resize', drawLive);
  loadModels();
  pollMetrics();
}

start();
