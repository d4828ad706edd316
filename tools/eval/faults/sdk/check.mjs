// The official OpenAI Node SDK (npm `openai` 6.x) against a cacheroute-gateway in front of the
// engine emulator: a request that works, and each error a client meets, which the SDK must
// surface with its status and the server's message. Run by ./run, which starts the processes;
// GATEWAY_URL and API_KEY say where and how. Prints one line per case and exits 1 when any failed.
import OpenAI from 'openai';

const base = process.env.GATEWAY_URL;
const key = process.env.API_KEY;
const model = process.env.MODEL ?? 'cacheroute-emu';
if (!base || !key) {
  console.error('check.mjs: GATEWAY_URL and API_KEY must be set (run ./run)');
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 20000 });
const messages = [{ role: 'user', content: 'Hello.' }];

// Expects `call` to throw an OpenAI.APIError with `status` whose message contains `part`; returns
// what is wrong, or '' when all is as expected. `stringCode`: the error is the gateway's own, whose
// `code` must be a string or null as OpenAI's are (an engine's, passed through, is vLLM's: the
// HTTP status as a number).
async function expectError(call, status, part, stringCode = false) {
  try {
    await call();
    return `no error (expected ${status})`;
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) return `not an APIError: ${e}`;
    const problems = [];
    if (e.status !== status) problems.push(`status ${e.status}, expected ${status}`);
    if (/no body/.test(e.message)) problems.push(`the SDK read no error: "${e.message}"`);
    else if (!e.message.includes(part)) problems.push(`message "${e.message}" lacks "${part}"`);
    if (stringCode && e.code !== null && e.code !== undefined && typeof e.code !== 'string') {
      problems.push(`error.code is a ${typeof e.code} (${e.code}); OpenAI sends a string or null`);
    }
    return problems.join('; ');
  }
}

const cases = [
  ['chat completion, streamed', async () => {
    const stream = await client.chat.completions.create({ model, messages, max_tokens: 5, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    return text.length > 0 ? '' : 'no text streamed';
  }],
  ['chat completion, whole', async () => {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 5 });
    return r.choices[0]?.message?.content ? '' : 'no message content';
  }],
  ['models.list', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    return ids.includes(model) ? '' : `${model} not in [${ids}]`;
  }],
  ['models.retrieve', async () => {
    try {
      const m = await client.models.retrieve(model);
      return m.id === model ? '' : `id ${m.id}`;
    } catch (e) {
      return `${e.status ?? ''} ${e.message}`;
    }
  }],
  ['models.retrieve, unknown id: 404 with its message', () => expectError(
    () => client.models.retrieve('no-such-model'), 404, 'no-such-model', true)],
  ['unknown model: 404 with its message', () => expectError(
    () => client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 5 }),
    404, 'no-such-model')],
  ['bad request (max_tokens 0): 400 with its message', () => expectError(
    () => client.chat.completions.create({ model, messages, max_tokens: 0 }), 400, 'max_tokens')],
  ['wrong API key: 401 with its message', () => expectError(
    () => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong-key', maxRetries: 0 })
      .chat.completions.create({ model, messages, max_tokens: 5 }), 401, 'API key', true)],
  ['"Authorization: bearer" (lowercase scheme) accepted', async () => {
    const r = await fetch(`${base}/v1/models`, { headers: { authorization: `bearer ${key}` } });
    return r.status === 200 ? '' : `status ${r.status}`;
  }],
];

let passed = 0;
let failed = 0;
for (const [name, run] of cases) {
  let problem;
  try {
    problem = await run();
  } catch (e) {
    problem = `threw: ${e.status ?? ''} ${e.message}`;
  }
  if (problem) {
    failed += 1;
    console.log(`FAIL  ${name}: ${problem}`);
  } else {
    passed += 1;
    console.log(`ok    ${name}`);
  }
}
console.log(`${passed} of ${passed + failed} cases as expected`);
process.exit(failed === 0 ? 0 : 1);
