// A TypeScript-SDK client (run by Node) subscribed to one session over streamable HTTP while
// another process writes the same file. Usage: node ts_subscribe.mjs URL SESSION_ID COUNT
// Prints "subscribed" once subscribed, "updated N" at the session's Nth resources/updated, then,
// after COUNT of them (and any list changes heard meanwhile), one JSON object: what it heard
// and the session's name and message count read back.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [url, id, updates, lists] = process.argv.slice(2);
const uri = `session://${id}`;
const client = new Client({ name: "ts-subscribe", version: "1.0.0" });
const heard = { updated: [], listChanged: 0 };
let done;
const enough = new Promise((resolve) => (done = resolve));
const check = () => {
  const mine = heard.updated.filter((u) => u === uri).length;
  if (mine >= Number(updates) && heard.listChanged >= Number(lists)) done();
};
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  heard.updated.push(n.params.uri);
  if (n.params.uri === uri) console.log(`updated ${heard.updated.filter((u) => u === uri).length}`);
  check();
});
client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
  heard.listChanged += 1;
  check();
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
await client.subscribeResource({ uri });
console.log("subscribed");
await enough;
const read = await client.callTool({ name: "session_get", arguments: { session_id: id, limit: 0 } });
heard.name = read.structuredContent.session.name;
heard.messages = read.structuredContent.session.messageCount;
await client.unsubscribeResource({ uri });
console.log(JSON.stringify(heard));
await client.close();
