// A TypeScript-SDK client (run by Node) against our server, over streamable HTTP or stdio.
// Usage: node ts_client.mjs http URL TOKEN
//        node ts_client.mjs stdio COMMAND ARG...   (spawns the server)
// Prints one JSON object with what it saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [kind, ...rest] = process.argv.slice(2);
const transport =
  kind === "stdio"
    ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(rest[0]), {
        requestInit: { headers: { Authorization: `Bearer ${rest[1]}` } },
      });
const client = new Client({ name: "ts-peer", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name);
const created = await client.callTool({ name: "session_create", arguments: { name: "from-ts" } });
const id = created.structuredContent.id;
await client.callTool({
  name: "session_append",
  arguments: { session_id: id, entry: { type: "message", role: "user", content: "hello from ts" } },
});
// A message far larger than a pipe's buffer, there and back.
const big = "x".repeat(3_000_000) + " ünïcödé";
const appended = await client.callTool({
  name: "session_append",
  arguments: { session_id: id, entry: { type: "message", role: "user", content: big } },
});
const bigId = appended.structuredContent.entryId;
// Too large for a page: session_get shows a stub naming the resource that has it whole.
const branch = await client.callTool({ name: "session_get", arguments: { session_id: id } });
const stub = branch.structuredContent.entries.at(-1);
const bigUri = `session://${id}/entries/${bigId}`;
const bigEntry = await client.readResource({ uri: bigUri });
const bigBack = JSON.parse(bigEntry.contents[0].text).message.content;
// Read in pieces by the text blocks alone, each answer naming the next offset (the SDK checks
// every answer against session_get's output schema).
let pieces = "";
let offset = 0;
let pieceCalls = 0;
while (offset !== null) {
  const answer = await client.callTool({
    name: "session_get",
    arguments: { session_id: id, entry_id: bigId, offset },
  });
  const piece = JSON.parse(answer.content[0].text).piece;
  pieces += piece.text;
  offset = piece.nextOffset;
  pieceCalls += 1;
}
// What does not apply to a view is left out, not null, and the schema check still passes.
const views = {};
for (const view of ["branch", "tree", "outline", "entries"]) {
  const answer = await client.callTool({ name: "session_get", arguments: { session_id: id, view } });
  views[view] = Object.keys(answer.structuredContent).filter((key) => answer.structuredContent[key] === null);
}
// The file in pages of one line, to the end by the cursors (the SDK checks each page against
// session_export's output schema).
let exportLines = 0;
let exportCursor = null;
do {
  const page = await client.callTool({
    name: "session_export",
    arguments: { session_id: id, limit: 1, cursor: exportCursor },
  });
  exportLines += page.structuredContent.jsonl ? page.structuredContent.jsonl.split("\n").length - 1 : 0;
  exportCursor = page.structuredContent.nextCursor ?? null;
} while (exportCursor !== null);
const bad = await client.callTool({ name: "session_get", arguments: { session_id: "missing" } });
const resources = (await client.listResources()).resources.map((r) => r.uri);
const read = await client.readResource({ uri: `session://${id}/context` });
const prompt = await client.getPrompt({ name: "continue_session", arguments: { session_id: id } });
console.log(JSON.stringify({
  protocol: client.getServerVersion(),
  tools,
  id,
  badIsError: bad.isError === true,
  badText: bad.content[0].text,
  resources,
  context: JSON.parse(read.contents[0].text),
  bigStubbed: stub.id === bigId && stub.message === undefined && stub.omitted.includes(bigUri),
  bigRoundTrip: bigBack === big,
  piecesWhole: pieces === bigEntry.contents[0].text,
  pieceCalls,
  views,
  exportLines,
  promptRoles: prompt.messages.map((m) => m.role),
}));
await client.close();
