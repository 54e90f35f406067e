// pi's own session folders, made and read by pi's SessionManager.
//   node folders.mjs PEERS_DIR make AGENT_DIR   -> sessions in AGENT_DIR/sessions/<cwd folder>/
//   node folders.mjs PEERS_DIR read AGENT_DIR   -> what pi lists and opens there
//   node folders.mjs PEERS_DIR continue FILE    -> pi asks one more question in FILE
//   node folders.mjs PEERS_DIR random DIR SEED  -> a session of every entry kind, branches
//                                                   and labels, made at random in DIR
//   node folders.mjs PEERS_DIR -    (one job a line on stdin: {"command", "dir", "seed"}; one
//                                    answer a line, or {error}: pi's code is loaded once)
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. pi finds its folder through
// $PI_CODING_AGENT_DIR, set here to AGENT_DIR (pi reads it at each use).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const [peers, command, agentDir, seedText] = process.argv.slice(2);
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
// Each message a millisecond after the one before, as a person's would be: pi lists sessions
// by their last message's time, and two made within one millisecond would tie.
let clock = 0;
const now = () => (clock = Math.max(Date.now(), clock + 1));
const user = (text) => ({ role: "user", content: text, timestamp: now() });
const assistant = (text) => ({
  role: "assistant",
  content: [{ type: "text", text }],
  api: "openai-completions",
  provider: "openai",
  model: "gpt-4o-mini",
  usage: usage(12, 5),
  stopReason: "stop",
  timestamp: now(),
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

function random(dir, seedNumber) {
  let state = seedNumber * 7919 + 13;
  const next = () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state / 2147483648;
  };
  const pick = (items) => items[Math.floor(next() * items.length)];
  const manager = pi.SessionManager.create("/home/ada/random", dir);
  manager.appendMessage(user("start"));
  manager.appendMessage(assistant("ok"));
  for (let i = 0; i < 60; i++) {
    const ids = manager.getEntries().map((e) => e.id);
    const roll = next();
    if (roll < 0.2) {
      const blocks = [{ type: "text", text: `b${i}` }, { type: "image", data: "aGk=", mimeType: "image/png" }];
      manager.appendMessage({ ...user(`q${i}`), content: pick([`q${i}`, blocks]) });
    } else if (roll < 0.35) {
      const call = { type: "toolCall", id: `c${i}`, name: "bash", arguments: { c: i } };
      const answer = assistant(`a${i}`);
      manager.appendMessage({ ...answer, content: [...answer.content, call], model: `m${i}`, stopReason: "toolUse" });
      manager.appendMessage({
        role: "toolResult",
        toolCallId: `c${i}`,
        toolName: "bash",
        content: [{ type: "text", text: "r" }],
        details: pick([undefined, { n: i }]),
        isError: next() < 0.2,
        timestamp: Date.now(),
      });
    } else if (roll < 0.4) {
      const excluded = next() < 0.3 ? true : undefined;
      const exitCode = pick([0, 1, undefined]);
      const run = { command: "ls", output: "o", exitCode, cancelled: false, truncated: false };
      manager.appendMessage({ role: "bashExecution", ...run, excludeFromContext: excluded, timestamp: Date.now() });
    } else if (roll < 0.45) manager.appendThinkingLevelChange(pick(["low", "high", "off"]));
    else if (roll < 0.5) manager.appendModelChange("google", `g${i}`);
    else if (roll < 0.55) {
      // An extension may leave display out (pi then hides the message) or give null details.
      const content = pick([`note ${i}`, [{ type: "text", text: "note" }]]);
      manager.appendCustomMessageEntry("ext", content, pick([true, false, undefined]), pick([undefined, null, { d: i }]));
    } else if (roll < 0.6) manager.appendCustomEntry("state", pick([undefined, { s: i }]));
    else if (roll < 0.67) manager.appendLabelChange(pick(ids), pick([`L${i}`, "", undefined]));
    else if (roll < 0.72) {
      const kept = pick([...manager.getBranch().map((e) => e.id), pick(ids)]);
      manager.appendCompaction(`summary ${i}`, kept, 100 * i, pick([undefined, { readFiles: [] }]), pick([undefined, true]));
    } else if (roll < 0.77) manager.appendSessionInfo(pick([`name ${i}`, "  ", " padded "]));
    else if (roll < 0.85) manager.branch(pick(ids));
    else if (roll < 0.9) manager.branchWithSummary(pick([...ids, null]), pick([`left ${i}`, ""]), undefined, pick([undefined, true]));
    else if (roll < 0.93) manager.resetLeaf();
    else manager.appendMessage(user(`u${i}`));
  }
  manager.appendMessage(assistant("end"));
  return { file: manager.getSessionFile() };
}

async function answer(command, agentDir, seedText) {
  process.env.PI_CODING_AGENT_DIR = agentDir;
  const result =
    command === "make"
      ? make()
      : command === "continue"
        ? continueFile(agentDir)
        : command === "random"
          ? random(agentDir, Number(seedText))
          : await read();
  return { piVersion: pkg.version, result };
}

if (command === "-") {
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    let out;
    try {
      const job = JSON.parse(line);
      out = await answer(job.command, job.dir, job.seed);
    } catch (error) {
      out = { error: String(error?.stack ?? error) };
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  }
} else {
  process.stdout.write(JSON.stringify(await answer(command, agentDir, seedText)));
}
