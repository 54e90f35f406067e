// pi resumes a session file as `pi --session FILE` does (SessionManager.open, then
// createAgentSession, which restores the model and thinking level) and asks one question of
// an OpenAI-compatible fake on loopback.
//   node resume.mjs PEERS_DIR AGENT_DIR FILE MODELS_JSON [SETTINGS_JSON]
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. AGENT_DIR is pi's agent folder
// (made here, with SETTINGS_JSON as its settings.json: by default none, so pi's own defaults
// hold).
// MODELS_JSON lists pi's providers as its models.json does, without baseUrl, api and apiKey
// (the fake's are filled in): {"provider": [{"id": ..., "reasoning": ...}, ...], ...}.
// Prints {restored: {model, thinkingLevel, fallback}, appended: [entries pi wrote],
// sent: [the messages of each request the fake got]}.
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, agentDir, file, modelsJson, settingsJson = "{}"] = process.argv.slice(2);
process.env.PI_CODING_AGENT_DIR = agentDir;
process.env.PI_TELEMETRY = "0";

const sent = [];
const server = createServer((request, response) => {
  let body = "";
  request.on("data", (chunk) => (body += chunk));
  request.on("end", () => {
    const asked = JSON.parse(body);
    sent.push(asked.messages);
    const chunk = (data) => `data: ${JSON.stringify({ id: "r", object: "chat.completion.chunk", created: 1, model: asked.model, ...data })}\n\n`;
    response.writeHead(200, { "content-type": "text/event-stream" });
    response.write(chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "pi's answer" }, finish_reason: null }] }));
    response.write(chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }));
    response.write(chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 } }));
    response.end("data: [DONE]\n\n");
  });
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const baseUrl = `http://127.0.0.1:${server.address().port}/v1`;

mkdirSync(agentDir, { recursive: true });
const providers = {};
for (const [name, models] of Object.entries(JSON.parse(modelsJson))) {
  providers[name] = { baseUrl, api: "openai-completions", apiKey: "k", models: models.map((m) => ({ input: ["text", "image"], ...m })) };
}
writeFileSync(join(agentDir, "models.json"), JSON.stringify({ providers }));
writeFileSync(join(agentDir, "settings.json"), settingsJson);

const pi = await import(pathToFileURL(join(peers, "node_modules/@mariozechner/pi-coding-agent/dist/index.js")).href);
const authStorage = pi.AuthStorage.create(join(agentDir, "auth.json"));
const modelRegistry = pi.ModelRegistry.create(authStorage, join(agentDir, "models.json"));
const sessionManager = pi.SessionManager.open(file);
const before = sessionManager.getEntries().length;
const { session, modelFallbackMessage } = await pi.createAgentSession({ agentDir, authStorage, modelRegistry, sessionManager, noTools: "all" });
const restored = {
  model: session.model ? { provider: session.model.provider, modelId: session.model.id } : null,
  thinkingLevel: session.thinkingLevel,
  fallback: modelFallbackMessage ?? null,
};
await session.prompt("asked in pi");
const appended = sessionManager.getEntries().slice(before);
session.dispose();
server.close();
process.stdout.write(JSON.stringify({ restored, appended, sent }));
