// Malformed and hostile input: every request gets the right 4xx with an OpenAI error object,
// slow clients do not block others, and the server stays healthy throughout.
import net from 'node:net';
import { check, main, openSockets, startServer } from './lib.mjs';

async function post(base, path, body, headers = {}) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch (e) {
    // checked below
  }
  return { status: r.status, json, text, headers: r.headers };
}

// Raw HTTP over a socket, for bodies fetch would not send (invalid UTF-8 as is, lying lengths).
function raw(port, bytes, { waitMs = 5000 } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let out = Buffer.alloc(0);
    s.on('data', (d) => (out = Buffer.concat([out, d])));
    s.on('error', () => resolve(out.toString('latin1')));
    s.on('close', () => resolve(out.toString('latin1')));
    s.write(bytes);
    setTimeout(() => {
      s.destroy();
      resolve(out.toString('latin1'));
    }, waitMs);
  });
}

main(async () => {
  const srv = await startServer(['--slots', '4']);
  try {
    const msg = (extra) => JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], ...extra });
    const cases = [
      ['bad JSON', '/v1/chat/completions', '{"model": "tiny", "messages": [', 400],
      ['not an object', '/v1/chat/completions', '[1,2,3]', 400],
      ['empty body', '/v1/chat/completions', '', 400],
      ['messages wrong type', '/v1/chat/completions', JSON.stringify({ messages: 'hello' }), 400],
      ['message without content', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user' }] }), 400],
      ['role wrong type', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 5, content: 'x' }] }), 400],
      ['temperature string', '/v1/chat/completions', msg({ temperature: 'hot' }), 400],
      ['huge max_tokens', '/v1/chat/completions', msg({ max_tokens: 1e300 }), 400],
      ['huge integer max_tokens', '/v1/chat/completions', msg({ max_tokens: 123456789012345 }), 400],
      ['negative max_tokens', '/v1/chat/completions', msg({ max_tokens: -1 }), 400],
      ['huge seed', '/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"seed":1e999}', 400],
      ['nested garbage', '/v1/chat/completions', '['.repeat(100000) + ']'.repeat(100000), 400],
      ['prompt ids out of vocab', '/v1/completions', JSON.stringify({ prompt: [1, 2, 1e9] }), 400],
      ['prompt too long', '/v1/completions', JSON.stringify({ prompt: 'a '.repeat(3000) }), 400],
      ['unknown model', '/v1/completions', JSON.stringify({ model: 'gpt-9', prompt: 'x' }), 404],
      ['unknown priority', '/v1/completions', JSON.stringify({ prompt: 'x', priority: 'vip' }), 400],
      ['10 MB body', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(10 << 20) }] }), 413],
    ];
    for (const [name, path, body, status] of cases) {
      let r;
      try {
        r = await post(srv.base, path, body);
      } catch (e) {
        // A server may close the connection after answering 413 before the whole body is sent;
        // fetch then reports the reset. Check the answer through a raw socket instead.
        check(status === 413, `${name}: request failed: ${e}`);
        const head = await raw(srv.port, `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, { waitMs: 2000 });
        check(head.startsWith('HTTP/1.1 413'), `${name}: raw answer ${head.slice(0, 40)}`);
        continue;
      }
      check(r.status === status, `${name}: status ${r.status}, expected ${status}: ${r.text.slice(0, 200)}`);
      check(r.json && r.json.error && typeof r.json.error.message === 'string' && 'type' in r.json.error &&
            'param' in r.json.error && 'code' in r.json.error, `${name}: not an OpenAI error object: ${r.text.slice(0, 200)}`);
    }

    // Invalid UTF-8 inside a JSON string, sent byte for byte.
    const bad = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]);
    const ans = await raw(srv.port, Buffer.concat([
      Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${bad.length}\r\n\r\n`), bad]));
    check(ans.startsWith('HTTP/1.1 400'), 'invalid UTF-8: ' + ans.slice(0, 60));
    check(ans.includes('"invalid_json"'), 'invalid UTF-8 error code: ' + ans.slice(-200));

    // A lying Content-Length and a header-only slowloris: they must not block other clients.
    const slow = openSockets(srv.port, 20,
      'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt":');
    const drip = net.connect(srv.port, '127.0.0.1');
    drip.on('error', () => {});
    drip.write('GET /health HTTP/1.1\r\n');
    const dripTimer = setInterval(() => drip.write('X-Slow: 1\r\n'), 200);
    const t0 = Date.now();
    const ok = await post(srv.base, '/v1/completions', JSON.stringify({ prompt: 'still serving', max_tokens: 4 }));
    check(ok.status === 200, 'normal request beside slow clients: ' + ok.status);
    check(Date.now() - t0 < 5000, 'normal request took ' + (Date.now() - t0) + ' ms beside slow clients');
    clearInterval(dripTimer);
    drip.destroy();
    for (const s of slow) s.destroy();

    // Garbage that is not HTTP at all.
    await raw(srv.port, Buffer.from([0, 1, 2, 3, 255, 254, 13, 10, 13, 10]), { waitMs: 500 });
    await raw(srv.port, 'GET /' + 'a'.repeat(20000) + ' HTTP/1.1\r\nHost: x\r\n\r\n', { waitMs: 500 });

    const h = await fetch(srv.base + '/health');
    check(h.status === 200, 'health after hostile input: ' + h.status);
    const after = await post(srv.base, '/v1/chat/completions', msg({ max_tokens: 3 }));
    check(after.status === 200 && after.json.usage.completion_tokens <= 3, 'chat after hostile input: ' + after.text.slice(0, 200));
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
});
