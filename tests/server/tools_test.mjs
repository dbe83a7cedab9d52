// The official `openai` npm client's tools example against `edgeseek serve` with the tiny
// model and a Qwen-style (Hermes) chat template: tool_choice "required" gives a call whose
// arguments match the tool's schema (finish_reason "tool_calls"), the result goes back as a
// `role: "tool"` message through the template, streamed calls arrive as tool_calls deltas, and
// a bad parameters schema is the SDK's BadRequestError.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { check, main, startServer, tinyConfig, tinyTokenizer } from './lib.mjs';

const kTemplate = `{%- if tools %}<|im_start|>system
You can call functions:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Reply with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.tool_calls %}<|im_start|>assistant
{%- for tc in message.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`;

main(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'es-tools-'));
  fs.copyFileSync(path.join(tinyTokenizer, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
  const cfg = JSON.parse(fs.readFileSync(path.join(tinyTokenizer, 'tokenizer_config.json'), 'utf8'));
  cfg.chat_template = kTemplate;
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  const srv = await startServer(['--synthetic', tinyConfig, '--tokenizer', dir, '--alias', 'tiny'], { model: false });
  try {
    const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
    const tools = [{
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Current weather of a city',
        parameters: {
          type: 'object',
          properties: { city: { type: 'string', maxLength: 12 }, unit: { type: 'string', enum: ['c', 'f'] } },
          required: ['city', 'unit'],
          additionalProperties: false,
        },
      },
    }];
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const r = await client.chat.completions.create({ model: 'tiny', messages, tools, tool_choice: 'required', max_tokens: 300, seed: 7 });
    check(r.choices[0].finish_reason === 'tool_calls', 'finish ' + r.choices[0].finish_reason + ' ' + JSON.stringify(r.choices[0].message));
    const call = r.choices[0].message.tool_calls[0];
    check(call.type === 'function' && call.function.name === 'get_weather', 'call ' + JSON.stringify(call));
    const args = JSON.parse(call.function.arguments);
    check(typeof args.city === 'string' && args.city.length <= 12 && ['c', 'f'].includes(args.unit), 'args ' + call.function.arguments);
    console.log('tool call:', call.function.name, call.function.arguments);

    // ---- round trip: the tool's answer through the template ----
    messages.push(r.choices[0].message);
    messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 12 }) });
    const r2 = await client.chat.completions.create({ model: 'tiny', messages, tools, max_tokens: 8 });
    check(r2.choices[0].message.role === 'assistant', 'round trip');

    // ---- streamed: tool_calls deltas with an id, the name, then the arguments ----
    const stream = await client.chat.completions.create({
      model: 'tiny', messages: messages.slice(0, 1), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 300, seed: 3, stream: true,
    });
    let id = '', name = '', sargs = '', finish = null;
    for await (const chunk of stream) {
      if (!chunk.choices.length) continue;
      const d = chunk.choices[0].delta;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      for (const tc of d.tool_calls || []) {
        if (tc.id) id = tc.id;
        if (tc.function?.name) name += tc.function.name;
        if (tc.function?.arguments) sargs += tc.function.arguments;
      }
    }
    check(finish === 'tool_calls' && id.startsWith('call_') && name === 'get_weather', `stream ${finish} ${id} ${name}`);
    check(typeof JSON.parse(sargs).city === 'string', 'stream args ' + sargs);

    // ---- a schema the compiler cannot enforce: 400 as the SDK's typed error ----
    let status = 0;
    try {
      await client.chat.completions.create({
        model: 'tiny', messages: messages.slice(0, 1), max_tokens: 4,
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string', pattern: '^a' } } }],
      });
    } catch (e) {
      status = e.status;
      check(e instanceof OpenAI.BadRequestError && /pattern/.test(e.message), 'error ' + e.message);
    }
    check(status === 400, 'bad schema status ' + status);
  } finally {
    await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
