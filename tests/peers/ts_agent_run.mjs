// A TypeScript-SDK client (run by Node) that waits on one agent_run over streamable HTTP, with
// progress. Usage: node ts_agent_run.mjs URL PROMPT TIMEOUT_MS RESET_ON_PROGRESS(true|false)
// Prints "progress N" for each progress notification as it comes, then one JSON object: the
// answer (or the error), and every progress value seen.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, prompt, timeout, reset] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "ts-agent-run", version: "1.0.0" });
await client.connect(transport);
const progress = [];
const seen = { progress };
try {
  const result = await client.callTool(
    { name: "agent_run", arguments: { prompt } },
    undefined,
    {
      timeout: Number(timeout),
      resetTimeoutOnProgress: reset === "true",
      onprogress: (p) => {
        progress.push(p.progress);
        console.log(`progress ${p.progress}`);
      },
    },
  );
  seen.isError = result.isError === true;
  seen.answer = result.structuredContent?.answer;
  seen.events = result.structuredContent?.events;
} catch (error) {
  seen.error = String(error);
}
console.log(JSON.stringify(seen));
await client.close();
