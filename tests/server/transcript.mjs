// A short session with the official `openai` client, for docs/server.md: the models list, one
// chat completion and one streamed chat with reasoning_content. Not a test (it checks only that
// each call succeeds); it prints what a user sees.
//
//   node tests/server/transcript.mjs --url http://127.0.0.1:8080 [--model NAME] [--api-key K]
//   node tests/server/transcript.mjs        # starts `edgeseek serve` itself (ES_CLI) on the tiny
//                                           # synthetic model, with a copy of the tiny tokenizer
//                                           # whose template opens <think> like DeepSeek-R1's
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, tinyConfig, tinyTokenizer } from './lib.mjs';

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

// The tiny tokenizer with R1's generation prompt ending: "<|im_start|>assistant\n<think>\n".
function r1StyleTokenizer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-transcript-'));
  fs.copyFileSync(path.join(tinyTokenizer, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
  const cfg = JSON.parse(fs.readFileSync(path.join(tinyTokenizer, 'tokenizer_config.json'), 'utf8'));
  cfg.chat_template = cfg.chat_template.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant\\n<think>\\n'");
  if (!cfg.chat_template.includes('<think>')) throw new Error('could not open <think> in the tiny template');
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  return dir;
}

const show = (label, obj) => console.log(`>>> ${label}\n${typeof obj === 'string' ? obj : JSON.stringify(obj, null, 2)}\n`);

let srv = null;
let url = arg('--url', null);
let model = arg('--model', null);
try {
  if (!url) {
    const tok = r1StyleTokenizer();
    srv = await startServer(['--synthetic', tinyConfig,
                             '--tokenizer', tok, '--alias', 'tiny-r1', '--reasoning', 'on'], { model: false });
    url = srv.base;
    model = model ?? 'tiny-r1';
  }
  const client = new OpenAI({ baseURL: url + '/v1', apiKey: arg('--api-key', 'none'), maxRetries: 0 });

  const models = await client.models.list();
  show('client.models.list()', models.data);
  model = model ?? models.data[0].id;

  const messages = [{ role: 'user', content: 'What is 2 + 3? Answer briefly.' }];
  show('request', { model, messages, max_tokens: 24, temperature: 0 });
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  show('client.chat.completions.create(...) -> choices[0].message, usage',
       { message: chat.choices[0].message, finish_reason: chat.choices[0].finish_reason, usage: chat.usage });

  show('streamed, stream_options.include_usage', { model, messages, max_tokens: 24, temperature: 0.8, seed: 7, stream: true });
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 24, temperature: 0.8, seed: 7, stream: true, stream_options: { include_usage: true },
  });
  let reasoning = '';
  let content = '';
  let chunks = 0;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    ++chunks;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.reasoning_content) {
      console.log(`  delta.reasoning_content: ${JSON.stringify(c.delta.reasoning_content)}`);
      reasoning += c.delta.reasoning_content;
    }
    if (c.delta.content) {
      console.log(`  delta.content: ${JSON.stringify(c.delta.content)}`);
      content += c.delta.content;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  show(`after ${chunks} chunks`, { reasoning_content: reasoning, content, finish_reason: finish, usage });
} finally {
  if (srv) await srv.stop();
}
