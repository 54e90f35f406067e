// pi's own agent loop as an oracle: each scenario runs through pi-agent-core's Agent with
// pi-ai's faux provider playing the scripted answers, and prints what happened.
//   node loop.mjs PEERS_DIR SCENARIOS.json
// PEERS_DIR holds node_modules/@mariozechner/pi-agent-core and pi-ai. SCENARIOS.json is a list
// of scenarios as tests/test_loop_pi.py writes them; prints one result per scenario,
// {name, events, messages, calls} in the form that test's normalise() gives our loop's run.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, file] = process.argv.slice(2);

async function load(name) {
  const root = join(peers, "node_modules", "@mariozechner", name);
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const entry = pkg.exports?.["."];
  const main = entry?.import ?? entry?.default ?? pkg.main ?? "dist/index.js";
  return import(pathToFileURL(join(root, typeof main === "string" ? main : main.default)).href);
}

const ai = await load("pi-ai");
const core = await load("pi-agent-core");

// Tool calls wait on each other through gates named by call id (or any name), so that the
// order in which parallel calls finish is set by the scenario, not by timers.
function gates() {
  const opened = new Map();
  const gate = (name) => {
    if (!opened.has(name)) {
      let open;
      const promise = new Promise((resolve) => (open = resolve));
      opened.set(name, { promise, open });
    }
    return opened.get(name);
  };
  return { wait: (name) => gate(name).promise, open: (name) => gate(name).open() };
}

function text(content) {
  if (typeof content === "string") return content;
  return content
    .map((b) => (b.type === "text" ? b.text : b.type === "toolCall" ? `[call ${b.id}]` : ""))
    .join("");
}

function makeTool(spec, agentRef, gate) {
  return {
    name: spec.name,
    label: spec.name,
    description: `the ${spec.name} tool`,
    parameters: spec.schema ?? { type: "object" },
    ...(spec.sequential ? { executionMode: "sequential" } : {}),
    async execute(toolCallId, params, signal, onUpdate) {
      try {
        if (params.after) await gate.wait(params.after);
        switch (spec.behaviour ?? "echo") {
          case "throw":
            throw new Error(`${spec.name} failed`);
          case "updates":
            onUpdate?.({ content: [{ type: "text", text: "working 1" }], details: { step: 1 } });
            onUpdate?.({ content: [{ type: "text", text: "working 2" }], details: { step: 2 } });
            break;
          case "waitAbort":
            if (!signal.aborted) await new Promise((resolve) => signal.addEventListener("abort", resolve));
            throw new Error(`${spec.name} stopped by the abort`);
          case "steer":
            agentRef.agent.steer({ role: "user", content: [{ type: "text", text: params.text }], timestamp: 1 });
            break;
          case "terminate":
            return { content: [{ type: "text", text: `${spec.name} done` }], details: {}, terminate: true };
        }
        return { content: [{ type: "text", text: `${spec.name} ${JSON.stringify(params)}` }], details: { id: toolCallId } };
      } finally {
        gate.open(toolCallId);
      }
    },
  };
}

function answer(spec) {
  const content = spec.content.map((b) =>
    b.type === "text" ? ai.fauxText(b.text) : ai.fauxToolCall(b.name, b.arguments, { id: b.id }),
  );
  const stopReason = spec.error ? "error" : spec.stopReason ?? (content.some((b) => b.type === "toolCall") ? "toolUse" : "stop");
  return ai.fauxAssistantMessage(content, { stopReason, ...(spec.error ? { errorMessage: spec.error } : {}) });
}

function describeSent(m) {
  return `${m.role}${m.role === "toolResult" ? ` ${m.toolCallId}` : ""}: ${text(m.content)}`;
}

function normaliseMessage(m) {
  switch (m.role) {
    case "assistant":
      return { role: m.role, text: text(m.content), stopReason: m.stopReason, ...(m.errorMessage ? { error: true } : {}) };
    case "toolResult":
      return { role: m.role, toolCallId: m.toolCallId, text: text(m.content), isError: m.isError };
    default:
      return { role: m.role, text: text(m.content) };
  }
}

function describe(event) {
  switch (event.type) {
    case "message_start":
    case "message_end": {
      const m = event.message;
      const what = m.role === "toolResult" ? m.toolCallId : m.role === "assistant" ? (event.type === "message_end" ? m.stopReason : "") : text(m.content);
      return `${event.type} ${m.role} ${what}`.trimEnd();
    }
    case "tool_execution_start":
    case "tool_execution_update":
      return `${event.type} ${event.toolCallId}`;
    case "tool_execution_end":
      return `${event.type} ${event.toolCallId}${event.isError ? " error" : ""}`;
    case "turn_end":
      return `turn_end ${event.message.stopReason} results=${event.toolResults.length}`;
    case "agent_end":
      return `agent_end messages=${event.messages.length}`;
    default:
      return event.type;
  }
}

async function run(scenario) {
  // One chunk per content block; a slow stream takes a while over each, long enough for an
  // abort from a listener to land before the stream has run to its end on its own.
  const faux = ai.registerFauxProvider({
    tokenSize: { min: 1_000_000, max: 1_000_000 },
    ...(scenario.slowStream ? { tokensPerSecond: 5 } : {}),
  });
  const calls = [];
  faux.setResponses(
    scenario.responses.map((spec) => (context, options) => {
      // A call made once the run is aborted only ends the run (ours makes none).
      if (!options?.signal?.aborted) calls.push(context.messages.map(describeSent));
      return answer(spec);
    }),
  );
  const gate = gates();
  const agentRef = {};
  const hooks = scenario.hooks ?? {};
  const agent = new core.Agent({
    initialState: { systemPrompt: "", model: faux.getModel(), tools: [] },
    toolExecution: scenario.toolExecution ?? "parallel",
    steeringMode: scenario.steeringMode ?? "one-at-a-time",
    followUpMode: scenario.followUpMode ?? "one-at-a-time",
    ...(hooks.block
      ? { beforeToolCall: async ({ toolCall }) => (hooks.block.includes(toolCall.name) ? { block: true, ...(hooks.reason ? { reason: hooks.reason } : {}) } : undefined) }
      : {}),
    ...(hooks.after
      ? {
          afterToolCall: async ({ toolCall }) => {
            const o = hooks.after[toolCall.name];
            if (!o) return undefined;
            if (o.throw) throw new Error(o.throw);
            return { content: [{ type: "text", text: o.text }], ...(o.isError !== undefined ? { isError: o.isError } : {}) };
          },
        }
      : {}),
    ...(hooks.keepLast ? { transformContext: async (messages) => messages.slice(-hooks.keepLast) } : {}),
  });
  agentRef.agent = agent;
  agent.state.tools = (scenario.tools ?? []).map((spec) => makeTool(spec, agentRef, gate));
  const events = [];
  const seen = new Map();
  agent.subscribe(async (event) => {
    const line = describe(event);
    if (!(line === "message_update" && events[events.length - 1] === line)) events.push(line);
    const count = (seen.get(event.type) ?? 0) + 1;
    seen.set(event.type, count);
    for (const action of scenario.actions ?? []) {
      if (action.on !== event.type || action.nth !== count) continue;
      const message = { role: "user", content: [{ type: "text", text: action.text ?? "" }], timestamp: 1 };
      if (action.do === "abort") agent.abort();
      else if (action.do === "steer") agent.steer(message);
      else if (action.do === "followUp") agent.followUp(message);
    }
  });
  let error = null;
  try {
    await agent.prompt(scenario.prompt);
    await agent.waitForIdle();
  } catch (e) {
    error = e instanceof Error ? e.message : String(e);
  }
  faux.unregister();
  return { name: scenario.name, events, messages: agent.state.messages.map(normaliseMessage), calls, error };
}

const scenarios = JSON.parse(readFileSync(file, "utf8"));
const results = [];
for (const scenario of scenarios) results.push(await run(scenario));
process.stdout.write(JSON.stringify({ piVersion: JSON.parse(readFileSync(join(peers, "node_modules", "@mariozechner", "pi-agent-core", "package.json"), "utf8")).version, results }, null, 1));
