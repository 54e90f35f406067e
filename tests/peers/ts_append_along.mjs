// A TypeScript-SDK client (run by Node) appending to one session over streamable HTTP while
// another client does. Usage: node ts_append_along.mjs URL SESSION_ID TAG COUNT OTHER_TAG
// Subscribes to the session, prints "subscribed", waits for a line on stdin, appends COUNT user
// messages "TAG n" one after another, and reads the session at each resources/updated until
// it has seen every "OTHER_TAG n" of the other client (COUNT of them). Prints one JSON object:
// its entries' ids, how many updates it heard and how many of the other's messages it saw
// before its own appends ended.
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, id, tag, count, otherTag] = process.argv.slice(2);
const uri = `session://${id}`;
const client = new Client({ name: "ts-append-along", version: "1.0.0" });
const seen = { mine: [], updates: 0, otherSeen: [] };
let allSeen;
const everyOther = new Promise((resolve) => (allSeen = resolve));
let reading = Promise.resolve();
let closing = false;
const read = async () => {
  const answer = await client.callTool({ name: "session_get", arguments: { session_id: id, limit: 0 } });
  const texts = answer.structuredContent.entries
    .filter((e) => e.type === "message")
    .map((e) => e.message.content)
    .map((c) => (typeof c === "string" ? c : c[0].text));
  seen.otherSeen = texts.filter((t) => t.startsWith(`${otherTag} `));
  if (seen.otherSeen.length >= Number(count)) allSeen();
};
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  if (n.params.uri !== uri || closing) return;
  seen.updates += 1;
  reading = reading.then(read); // one read at a time, in the order heard
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
await client.subscribeResource({ uri });
console.log("subscribed");
const lines = createInterface({ input: process.stdin });
await new Promise((resolve) => lines.once("line", resolve));
for (let n = 0; n < Number(count); n += 1) {
  const appended = await client.callTool({
    name: "session_append",
    arguments: { session_id: id, entry: { type: "message", role: "user", content: `${tag} ${n}` } },
  });
  seen.mine.push(appended.structuredContent.entryId);
}
seen.otherSeenWhileAppending = seen.otherSeen.length;
const guard = setTimeout(() => allSeen(), 30_000); // a hang guard: the test then fails
await everyOther;
clearTimeout(guard);
closing = true; // no read after the connection closes
await reading;
await client.unsubscribeResource({ uri });
console.log(JSON.stringify(seen));
await client.close();
lines.close();
