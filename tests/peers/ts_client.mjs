// A TypeScript-SDK client (run by Node) against our server over streamable HTTP.
// Usage: node ts_client.mjs URL TOKEN   (prints one JSON object with what it saw)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "ts-peer", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name);
const created = await client.callTool({ name: "session_create", arguments: { name: "from-ts" } });
const id = created.structuredContent.id;
await client.callTool({
  name: "session_append",
  arguments: { session_id: id, entry: { type: "message", message: { role: "user", content: "hello from ts" } } },
});
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
  promptRoles: prompt.messages.map((m) => m.role),
}));
await client.close();
