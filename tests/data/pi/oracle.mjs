// pi's own session code as an oracle: parseSessionEntries -> migrateSessionEntries ->
// buildSessionContext -> convertToLlm on one file.
//   node oracle.mjs PEERS_DIR FILE.jsonl [LEAF_ID|null ...]
//   node oracle.mjs PEERS_DIR -    (one job a line on stdin: {"file", "leaves"}; one answer a line)
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. Without LEAF_IDs pi's default
// (the last entry of the file) is used. Prints {piVersion, entries, results: [{leafId,
// context, llmMessages}, ...], manager}, one result per leaf; manager is what pi's
// SessionManager shows of the file: {leafId, name, tree}, the tree as its nodes in depth-first
// order, each {id, label, children: [ids]}. With "-" each answer is that object or {error}:
// pi's code is loaded once for every file (its load is most of a run's 2 s of CPU).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const [peers, file, ...leafArgs] = process.argv.slice(2);
const root = join(peers, "node_modules", "@mariozechner", "pi-coding-agent");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const main = pkg.exports?.["."]?.import ?? pkg.exports?.["."]?.default ?? pkg.main ?? "dist/index.js";
const pi = await import(pathToFileURL(join(root, typeof main === "string" ? main : main.default)).href);

function oracle(file, leafArgs) {
  const entries = pi.parseSessionEntries(readFileSync(file, "utf8"));
  pi.migrateSessionEntries(entries);
  const body = entries.filter((e) => e.type !== "session");
  const defaultLeaf = body.length ? body[body.length - 1].id : null;
  const leaves = leafArgs.length ? leafArgs.map((a) => (a === "null" ? null : a)) : [defaultLeaf];
  const results = leaves.map((leafId) => {
    const ctx = pi.buildSessionContext(body, leafId);
    return {
      leafId,
      context: { messages: ctx.messages, thinkingLevel: ctx.thinkingLevel, model: ctx.model },
      llmMessages: pi.convertToLlm(ctx.messages),
    };
  });
  // Not persisting: pi rewrites a file it migrates when it persists, and FILE may be a sample.
  const manager = new pi.SessionManager("/", "", file, false);
  const tree = [];
  const stack = [...manager.getTree()].reverse();
  while (stack.length) {
    const node = stack.pop();
    tree.push({ id: node.entry.id, label: node.label ?? null, children: node.children.map((c) => c.entry.id) });
    stack.push(...[...node.children].reverse());
  }
  const managed = { leafId: manager.getLeafId(), name: manager.getSessionName() ?? null, tree };
  return { piVersion: pkg.version, entries: body, results, manager: managed };
}

if (file === "-") {
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    let answer;
    try {
      const job = JSON.parse(line);
      answer = oracle(job.file, job.leaves ?? []);
    } catch (error) {
      answer = { error: String(error?.stack ?? error) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  }
} else {
  process.stdout.write(JSON.stringify(oracle(file, leafArgs)));
}
