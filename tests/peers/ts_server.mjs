// A TypeScript-SDK server (run by Node) over stdio: a downstream server of ours that no one
// here wrote. Tools: echo(text), long(size) answering a text of size characters, pid().
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "ts-peer", version: "1.0.0" });
const text = (value) => ({ content: [{ type: "text", text: value }] });
server.tool("echo", { text: z.string() }, async ({ text: said }) => text(said));
server.tool("long", { size: z.number() }, async ({ size }) => text("x".repeat(size)));
server.tool("pid", {}, async () => text(String(process.pid)));
await server.connect(new StdioServerTransport());
