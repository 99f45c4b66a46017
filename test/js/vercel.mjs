// Two turns of a chat with the Vercel AI SDK (ai + @ai-sdk/openai, the Responses API with its
// defaults: store true) through codeinterp: the second turn sends the first turn's messages
// back as the SDK builds them, which names codeinterp's code calls by item_reference.
// Usage: node vercel.mjs BASE_URL API_KEY plain|stream. Prints one JSON object: each turn's
// text and tool calls; exits 1 with the error on stderr if a turn fails.
import { generateText, streamText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';

const [baseURL, apiKey, mode] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey });
const model = openai.responses('gpt-e2e');
const tools = { code_interpreter: openai.tools.codeInterpreter({}) };

async function turn(messages) {
  if (mode === 'stream') {
    const r = streamText({ model, tools, messages, onError: ({ error }) => { throw error; } });
    // The whole stream is read, as useChat does, before its results resolve.
    for await (const part of r.fullStream) {
      if (part.type === 'error') throw part.error;
    }
    return { text: await r.text, toolCalls: await r.toolCalls, toolResults: await r.toolResults, response: await r.response };
  }
  const r = await generateText({ model, tools, messages });
  return { text: r.text, toolCalls: r.toolCalls, toolResults: r.toolResults, response: r.response };
}

const summary = (t) => ({
  text: t.text,
  toolCalls: t.toolCalls.map((c) => ({ toolName: c.toolName, toolCallId: c.toolCallId, providerExecuted: c.providerExecuted })),
  toolResults: t.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
});

try {
  const history = [{ role: 'user', content: 'Keep 41 in x and print it.' }];
  const first = await turn(history);
  history.push(...first.response.messages, { role: 'user', content: 'Now print x + 1.' });
  const second = await turn(history);
  console.log(JSON.stringify({ first: summary(first), second: summary(second) }));
} catch (e) {
  console.error(String(e?.stack ?? e));
  if (e?.responseBody) console.error(e.responseBody);
  process.exit(1);
}
