// The official `openai` npm client against `edgeseek serve`: models list, chat (non-streaming
// and streaming with usage), completions (text and token ids), an API key, abort mid-stream
// freeing the KV slot (seen through /metrics), and errors surfacing as the SDK's typed errors.
import OpenAI from 'openai';
import { check, main, metrics, metricValue, startServer, waitFor } from './lib.mjs';

main(async () => {
  const srv = await startServer(['--api-key', 'sk-test', '--slots', '4']);
  try {
    const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'sk-test', maxRetries: 0 });

    // ---- models ----
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    check(JSON.stringify(models) === '["tiny"]', 'models: ' + JSON.stringify(models));

    // ---- chat, non-streaming ----
    const chat = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
      max_tokens: 12,
      temperature: 0,
      ignore_eos: true,
    });
    check(chat.object === 'chat.completion', 'object ' + chat.object);
    check(chat.choices[0].message.role === 'assistant', 'role');
    check(typeof chat.choices[0].message.content === 'string', 'content');
    check(chat.choices[0].finish_reason === 'length', 'finish ' + chat.choices[0].finish_reason);
    check(chat.usage.completion_tokens === 12, 'completion_tokens ' + chat.usage.completion_tokens);
    check(chat.usage.prompt_tokens > 5, 'prompt_tokens ' + chat.usage.prompt_tokens);
    check(chat.usage.total_tokens === chat.usage.prompt_tokens + 12, 'total_tokens');
    console.log('chat:', JSON.stringify(chat.choices[0].message.content));

    // ---- chat, streaming with usage: same text as non-streaming (greedy) ----
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
      max_tokens: 12,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      ++chunks;
      check(chunk.object === 'chat.completion.chunk', 'chunk object');
      if (chunk.usage) usage = chunk.usage;
      if (!chunk.choices.length) continue;
      text += chunk.choices[0].delta.content || '';
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    check(text === chat.choices[0].message.content, `stream text ${JSON.stringify(text)} != ${JSON.stringify(chat.choices[0].message.content)}`);
    check(finish === 'length', 'stream finish ' + finish);
    check(usage && usage.completion_tokens === 12, 'stream usage ' + JSON.stringify(usage));
    check(chunks >= 3, 'chunks ' + chunks);

    // ---- completions: text and token ids ----
    const comp = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true });
    check(comp.object === 'text_completion', 'completion object');
    check(comp.usage.completion_tokens === 8, 'completion tokens');
    const ids = await client.completions.create({ model: 'tiny', prompt: [10, 20, 30, 40], max_tokens: 5, temperature: 0.7, seed: 7, ignore_eos: true });
    const ids2 = await client.completions.create({ model: 'tiny', prompt: [10, 20, 30, 40], max_tokens: 5, temperature: 0.7, seed: 7, ignore_eos: true });
    check(ids.usage.prompt_tokens === 4, 'id prompt tokens');
    check(ids.choices[0].text === ids2.choices[0].text, 'seeded sampling not reproducible');

    // ---- errors as typed SDK errors ----
    let e404 = null;
    try {
      await client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] });
    } catch (e) {
      e404 = e;
    }
    check(e404 instanceof OpenAI.NotFoundError, 'unknown model -> ' + e404);
    check(e404.error && e404.error.code === 'model_not_found', 'code ' + JSON.stringify(e404.error));
    let e401 = null;
    try {
      await new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'wrong', maxRetries: 0 }).models.list();
    } catch (e) {
      e401 = e;
    }
    check(e401 instanceof OpenAI.AuthenticationError, 'bad key -> ' + e401);
    let e400 = null;
    try {
      await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: -3 });
    } catch (e) {
      e400 = e;
    }
    check(e400 instanceof OpenAI.BadRequestError && e400.param === 'max_tokens', 'negative max_tokens -> ' + e400);

    // ---- abort mid-stream: the sequence is cancelled and its KV freed ----
    const ac = new AbortController();
    const long = await client.chat.completions.create(
      { model: 'tiny', messages: [{ role: 'user', content: 'Tell a long story.' }], max_tokens: 900, ignore_eos: true, stream: true },
      { signal: ac.signal },
    );
    let got = 0;
    try {
      for await (const chunk of long) {
        if (chunk.choices.length && chunk.choices[0].delta.content) ++got;
        if (got === 5) {
          const m = await metrics(srv.base, 'sk-test');
          check(metricValue(m, 'edgeseek_running_sequences') === 1, 'running while streaming');
          check(metricValue(m, 'edgeseek_kv_cache_used_tokens') > 0, 'KV used while streaming');
          ac.abort();
        }
      }
    } catch (e) {
      check(e.name === 'APIUserAbortError' || e.name === 'AbortError', 'abort error ' + e.name);
    }
    const ms = await waitFor(async () => {
      const m = await metrics(srv.base, 'sk-test');
      return metricValue(m, 'edgeseek_kv_cache_used_tokens') === 0 && metricValue(m, 'edgeseek_running_sequences') === 0;
    }, 'KV freed after abort', 5000);
    console.log(`KV freed ${ms} ms after abort`);
    const m = await metrics(srv.base, 'sk-test');
    check(metricValue(m, 'edgeseek_request_finish_total', { reason: 'cancelled' }) >= 1, 'cancelled counted');
    check(metricValue(m, 'edgeseek_generation_tokens_total') < 900 + 12 + 12 + 8 + 10, 'aborted request ran on');
  } finally {
    const code = await srv.stop();
    check(code === 0, 'exit code ' + code);
  }
});
