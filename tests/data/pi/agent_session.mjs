// pi's own AgentSession makes a session, as a user of pi would, against an OpenAI-compatible
// fake on loopback: answers, bash tool calls, thinking level and model changes, an image, a
// label, /tree back to the first question with a branch summary, two compactions, a name, and
// /fork of the result.
//   node agent_session.mjs PEERS_DIR AGENT_DIR CWD
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. pi's agent folder (models.json,
// settings.json, sessions/) is made in AGENT_DIR. Prints {file, forkFile}.
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, agentDir, cwd] = process.argv.slice(2);
process.env.PI_CODING_AGENT_DIR = agentDir;
process.env.PI_TELEMETRY = "0";

// The fake answers by the last message: a summary to pi's summariser, a closing word after a
// tool result, a bash call when asked to run a tool.
let requests = 0;
const server = createServer((request, response) => {
  let body = "";
  request.on("data", (chunk) => (body += chunk));
  request.on("end", () => {
    requests += 1;
    const asked = JSON.parse(body);
    const text = (m) => (typeof m.content === "string" ? m.content : (m.content ?? []).map((b) => b.text ?? "").join(""));
    const last = asked.messages[asked.messages.length - 1];
    let delta;
    if (asked.messages.some((m) => text(m).includes("summarization assistant"))) {
      delta = { content: `## Goal\nTest pi sessions (${requests}).\n## Progress\nDid things.` };
    } else if (last.role === "tool") {
      delta = { content: "The tool ran; all done." };
    } else if (text(last).includes("run a tool")) {
      const call = { name: "bash", arguments: JSON.stringify({ command: "echo hello-from-bash" }) };
      delta = { content: "Running it.", tool_calls: [{ index: 0, id: `call_${requests}`, type: "function", function: call }] };
    } else {
      delta = { content: `Answer ${requests}.` };
    }
    const chunk = (data) => `data: ${JSON.stringify({ id: `r${requests}`, object: "chat.completion.chunk", created: 1, model: asked.model, ...data })}\n\n`;
    const finish = delta.tool_calls ? "tool_calls" : "stop";
    response.writeHead(200, { "content-type": "text/event-stream" });
    response.write(chunk({ choices: [{ index: 0, delta: { role: "assistant", ...delta }, finish_reason: null }] }));
    response.write(chunk({ choices: [{ index: 0, delta: {}, finish_reason: finish }] }));
    const usage = { prompt_tokens: 100 + requests, completion_tokens: 7, total_tokens: 107 + requests };
    response.write(chunk({ choices: [], usage }));
    response.end("data: [DONE]\n\n");
  });
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const baseUrl = `http://127.0.0.1:${server.address().port}/v1`;

mkdirSync(agentDir, { recursive: true });
mkdirSync(cwd, { recursive: true });
const model = (id, reasoning = true) => ({ id, reasoning, input: ["text", "image"], contextWindow: 128000, maxTokens: 4096 });
const provider = (models) => ({ baseUrl, api: "openai-completions", apiKey: "k", models });
const providers = { fake: provider([model("fake-a"), model("fake-b")]), other: provider([model("other-c", false)]) };
writeFileSync(join(agentDir, "models.json"), JSON.stringify({ providers }));
writeFileSync(join(agentDir, "settings.json"), "{}");

const pi = await import(pathToFileURL(join(peers, "node_modules/@mariozechner/pi-coding-agent/dist/index.js")).href);
const authStorage = pi.AuthStorage.create(join(agentDir, "auth.json"));
const modelRegistry = pi.ModelRegistry.create(authStorage, join(agentDir, "models.json"));
const find = (name, id) => modelRegistry.find(name, id);
const { session } = await pi.createAgentSession({
  cwd,
  agentDir,
  authStorage,
  modelRegistry,
  model: find("fake", "fake-a"),
  thinkingLevel: "low",
  sessionManager: pi.SessionManager.create(cwd),
});
const manager = session.sessionManager;
await session.prompt("hello there");
const firstQuestion = manager.getBranch().find((e) => e.type === "message" && e.message.role === "user").id;
await session.prompt("please run a tool");
session.setThinkingLevel("high");
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
await session.prompt("describe this image", { images: [{ type: "image", data: png, mimeType: "image/png" }] });
await session.setModel(find("fake", "fake-b"));
await session.prompt("after the model change");
manager.appendLabelChange(firstQuestion, "first question");
await session.navigateTree(firstQuestion, { summarize: true, label: "went back" });
await session.prompt("on the new branch");
await session.setModel(find("other", "other-c"));
await session.prompt("with the other model");
await session.compact();
await session.prompt("after the first compaction");
await session.prompt("please run a tool again");
await session.compact("keep it short");
await session.prompt("after the second compaction");
session.setSessionName("made by pi");
const file = manager.getSessionFile();
const forkFile = manager.createBranchedSession(manager.getLeafId());
session.dispose();
server.close();
process.stdout.write(JSON.stringify({ file, forkFile }));
