// A closed-loop client at its concurrency limit is never refused: it sends its next request as
// soon as it has read the previous answer ([DONE] of a stream, or the whole JSON), so the server
// must give the request's place back before those last bytes leave. Session 36 on an H100:
// `loadtest -c 64` against the default limit of 64 a client had 53 of 128 requests refused with
// 429 "too many concurrent requests for this client" while finished streams still held their
// places. Here the limit is 1, so every back-to-back request would collide.
import { check, main, startServer, tempFile } from './lib.mjs';

const kRounds = 40;
const kTokens = 48;  // a request's trace (built as it finishes) grows with its tokens

// One streamed completion, read until "data: [DONE]"; the body is then dropped unread (as a
// client that has what it wants does) and the status returned.
async function streamOnce(base, i) {
  const r = await fetch(base + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'round ' + i, max_tokens: kTokens, stream: true }),
  });
  if (r.status !== 200) return { status: r.status, body: await r.text() };
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    if (text.includes('data: [DONE]')) {
      reader.cancel().catch(() => {});
      break;
    }
  }
  check(text.includes('data: [DONE]'), `stream ${i} ended without [DONE]: ${text}`);
  return { status: 200 };
}

async function wholeOnce(base, i) {
  const r = await fetch(base + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'whole ' + i, max_tokens: kTokens }),
  });
  return { status: r.status, body: await r.text() };
}

main(async () => {
  const config = { limits: { max_concurrent_per_client: 1 } };
  const srv = await startServer(['--slots', '2', '--config', tempFile('closed_loop.json', JSON.stringify(config))]);
  try {
    // Idle keep-alive connections, open already, that the next request goes out on at once.
    await Promise.all([0, 1, 2, 3].map(() => fetch(srv.base + '/health').then((r) => r.text())));
    for (const [name, once] of [['stream', streamOnce], ['whole', wholeOnce]]) {
      const refused = [];
      for (let i = 0; i < kRounds; ++i) {
        const r = await once(srv.base, i);
        if (r.status !== 200) refused.push(`${i}: ${r.status} ${r.body}`);
      }
      check(refused.length === 0, `${name}: ${refused.length} of ${kRounds} back-to-back requests refused:\n${refused.slice(0, 3).join('\n')}`);
    }
  } finally {
    await srv.stop();
  }
});
