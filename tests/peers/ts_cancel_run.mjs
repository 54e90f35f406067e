// A TypeScript-SDK client (run by Node) that starts one agent_run over streamable HTTP and
// leaves it after AFTER progress notifications. Usage:
//   node ts_cancel_run.mjs URL PROMPT AFTER abort|sampling|exit|end
// abort: cancels the call with an AbortSignal (the SDK sends notifications/cancelled), then,
//   on the same connection, waits for the run to end, reads its session and starts another
//   run there; prints one JSON object of what it saw.
// sampling: as abort, the run on the client's own model (sampling/createMessage): the call is
//   cancelled as the server's request for the model comes, which is answered only once the
//   server has given it up (or after 10 s); the run after it is answered at once.
// exit: prints {"sessionId": ...} and exits at once (its connections drop, nothing said).
// end: prints {"sessionId": ...}, ends its MCP session (HTTP DELETE) and exits.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, prompt, after, mode] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client(
  { name: "ts-cancel-run", version: "1.0.0" },
  { capabilities: mode === "sampling" ? { sampling: {} } : {} },
);
const stop = new AbortController();
const sampling = { asked: 0, givenUp: 0 };
// (The SDK refuses a handler for a capability not declared.)
if (mode === "sampling") client.setRequestHandler(CreateMessageRequestSchema, async (_request, extra) => {
  sampling.asked += 1;
  if (sampling.asked > 1) {
    // The next run (of the session's model, the client's): answered at once.
    return { role: "assistant", content: { type: "text", text: "again" }, model: "ts" };
  }
  stop.abort("the user stopped it");
  await new Promise((resolve) => {
    const guard = setTimeout(resolve, 10_000);
    extra.signal.addEventListener("abort", () => {
      sampling.givenUp += 1;
      clearTimeout(guard);
      resolve();
    });
  });
  const content = { type: "text", text: "too late" };
  return { role: "assistant", content, model: "ts", stopReason: "endTurn" };
});
await client.connect(transport);
const created = await client.callTool({ name: "session_create", arguments: {} });
const sessionId = created.structuredContent.id;
let notes = 0;
const model = mode === "sampling" ? { model: "client" } : {};
const running = client.callTool(
  { name: "agent_run", arguments: { prompt, session_id: sessionId, ...model } },
  undefined,
  {
    signal: stop.signal,
    timeout: 60_000,
    onprogress: async () => {
      notes += 1;
      if (notes !== Number(after)) return;
      if (mode === "abort") {
        stop.abort("the user stopped it");
        return;
      }
      console.log(JSON.stringify({ sessionId }));
      if (mode === "end") await transport.terminateSession();
      process.exit(0);
    },
  },
);
const seen = { sessionId, sampling };
try {
  await running;
  seen.callEnded = "answered";
} catch (error) {
  seen.callEnded = String(error);
}
seen.notesWhenAborted = notes;
let run;
for (let tries = 0; tries < 200; tries += 1) {
  const runs = await client.callTool({ name: "agent_runs", arguments: {} });
  run = runs.structuredContent.runs.find((r) => r.sessionId === sessionId);
  if (run && run.status !== "running") break;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
seen.run = { status: run?.status, error: run?.error, answer: run?.answer };
seen.notesAfterwards = notes;
const branch = await client.callTool({ name: "session_get", arguments: { session_id: sessionId } });
seen.messages = branch.structuredContent.entries
  .filter((e) => e.type === "message")
  .map((e) => [e.message.role, e.message.stopReason ?? null]);
const again = await client.callTool({
  name: "agent_run",
  arguments: { prompt: "again", session_id: sessionId },
});
seen.again = again.structuredContent;
console.log(JSON.stringify(seen));
await client.close();
