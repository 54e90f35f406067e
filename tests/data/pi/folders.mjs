// pi's own session folders, made and read by pi's SessionManager.
//   node folders.mjs PEERS_DIR make AGENT_DIR   -> sessions in AGENT_DIR/sessions/<cwd folder>/
//   node folders.mjs PEERS_DIR read AGENT_DIR   -> what pi lists and opens there
//   node folders.mjs PEERS_DIR continue FILE    -> pi asks one more question in FILE
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. pi finds its folder through
// $PI_CODING_AGENT_DIR, set here to AGENT_DIR.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, command, agentDir] = process.argv.slice(2);
process.env.PI_CODING_AGENT_DIR = agentDir;
const root = join(peers, "node_modules", "@mariozechner", "pi-coding-agent");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const main = pkg.exports?.["."]?.import ?? pkg.exports?.["."]?.default ?? pkg.main ?? "dist/index.js";
const pi = await import(pathToFileURL(join(root, typeof main === "string" ? main : main.default)).href);

const usage = (input, output) => ({
  input,
  output,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: input + output,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
});
const user = (text) => ({ role: "user", content: text, timestamp: Date.now() });
const assistant = (text) => ({
  role: "assistant",
  content: [{ type: "text", text }],
  api: "openai-completions",
  provider: "openai",
  model: "gpt-4o-mini",
  usage: usage(12, 5),
  stopReason: "stop",
  timestamp: Date.now(),
});

function make() {
  const made = [];
  // Two working directories, one with a colon (pi turns / \ and : into -).
  const first = pi.SessionManager.create("/home/ada/app");
  const question = first.appendMessage(user("hello pi"));
  first.appendMessage(assistant("hi from pi"));
  first.appendSessionInfo("pi's first");
  first.appendLabelChange(question, "start");
  first.appendModelChange("openai", "gpt-4o-mini");
  first.appendMessage(user("second question"));
  first.appendMessage(assistant("second answer"));
  made.push(first);
  const second = pi.SessionManager.create("/home/ada/other:thing");
  second.appendMessage(user("other question"));
  second.appendMessage(assistant("other answer"));
  made.push(second);
  return made.map((m) => ({ id: m.getSessionId(), file: m.getSessionFile(), cwd: m.getCwd() }));
}

async function read() {
  const listed = await pi.SessionManager.listAll();
  return listed.map((info) => {
    const manager = pi.SessionManager.open(info.path);
    // And the file through pi's parse functions, as the session-format oracle reads it.
    const entries = pi.parseSessionEntries(readFileSync(info.path, "utf8"));
    pi.migrateSessionEntries(entries);
    const body = entries.filter((e) => e.type !== "session");
    const parsed = pi.buildSessionContext(body, body.length ? body[body.length - 1].id : null);
    const opened = manager.buildSessionContext();
    return {
      id: info.id,
      path: info.path,
      cwd: info.cwd,
      name: info.name ?? null,
      parentSessionPath: info.parentSessionPath ?? null,
      messageCount: info.messageCount,
      firstMessage: info.firstMessage,
      header: manager.getHeader(),
      leafId: manager.getLeafId(),
      entries: manager.getEntries(),
      context: { messages: opened.messages, thinkingLevel: opened.thinkingLevel, model: opened.model },
      parsedContext: { messages: parsed.messages, thinkingLevel: parsed.thinkingLevel, model: parsed.model },
    };
  });
}

function continueFile(file) {
  const manager = pi.SessionManager.open(file);
  manager.appendMessage(user("asked in pi"));
  manager.appendMessage(assistant("answered in pi"));
  return { id: manager.getSessionId(), entries: manager.getEntries(), leafId: manager.getLeafId() };
}

const result =
  command === "make" ? make() : command === "continue" ? continueFile(agentDir) : await read();
process.stdout.write(JSON.stringify({ piVersion: pkg.version, result }));
