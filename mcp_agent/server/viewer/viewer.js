// The session viewer: one page, two ways in.
//
// - data-transport="http": the HTTP server's own page. It speaks MCP (2026-07-28, each
//   request standing alone) to /mcp with fetch, authenticated by the server's token, which
//   the link serve printed carries in its fragment (#token=, never sent to a server): the
//   page keeps it in this origin's storage (its own port's alone) and takes it out of the
//   address bar. It listens for changes on a subscriptions/listen stream.
// - data-transport="app": an MCP App in a host's sandboxed frame. It speaks the MCP Apps
//   protocol (JSON-RPC over postMessage): ui/initialize, then the host hands it the tool's
//   result (ui/notifications/tool-result) and proxies its tools/call requests to the server.
//
// Everything the server sends is put on the page as text (textContent), never as markup.
"use strict";

const TRANSPORT = document.documentElement.dataset.transport;
const PROTOCOL = "2026-07-28";
const APPS_PROTOCOL = "2026-01-26";
const APP_INFO = { name: "mcp-agent-sessions viewer", version: "1" };
const UI_EXTENSION = "io.modelcontextprotocol/ui";
const UI_MIME = "text/html;profile=mcp-app";
const OUTLINE_PAGE = 300; // rows of an outline per request; earlier ones on demand
const OPEN_BRANCH_ROWS = 1000; // rows of an opened branch read at once; earlier ones on demand
const UNFOLD_PAGE = 200; // folded entries revealed per click
const UPDATE_PAGE = 10; // entries of a fold a live update reads first (most add one or two)
const ENTRIES_PAGE = 1000; // the most entries session_get gives at once
// The most entries an address naming an entry in a fold reads up its path, and the most rows
// it unfolds, to show the entry in the tree: five clicks' worth, a few requests and a page of
// a thousand rows more at most (a fold of 100,000 was read, or unfolded, whole: the tab froze).
// Past it the fold stays folded, and the entry's pane says where the entry is.
const UNFOLD_TO_MOST = UNFOLD_PAGE * 5;
const SESSIONS_PAGE = 50; // sessions listed per request ("More sessions": the next ones)
const $ = (id) => document.getElementById(id);

// --- talking to the server ----------------------------------------------------------------

class ToolFailed extends Error {}
/** No answer at all: the server away (stopped, restarting), said by the reconnecting line. */
class ServerAway extends Error {}

/** The server refuses the page itself (no token, an earlier start's, or a page it does not
 * take requests from): nothing it asks is answered until the reader opens the link. */
class SignedOut extends Error {
  constructor(message, title) {
    super(message);
    this.title = title; // what the page's heading says
  }
}

const TOKEN_KEY = "mcp-agent-sessions token";
const SIGN_IN = "This page needs the server's token: open the link with #token= that mcp-agent-sessions serve printed"
  + " when it started (the line \"session viewer: http://…/#token=…\").";
const TOKEN_REFUSED = "The server no longer takes this page's token (a server makes a"
  + " new one at each start, unless it reads one from --token-file). Open the link with #token="
  + " that mcp-agent-sessions serve printed when it last started.";

/** A link of the older form (/?token=…&session=…, or /?token=…#session=…: its session in the
 * fragment, which a redirect to the fragment form replaced): its query goes to the fragment,
 * where the page reads it, what the fragment names first; the query leaves the address bar. */
function queryToFragment() {
  const query = new URLSearchParams(location.search);
  if (!query.has("token") && !query.has("session")) return;
  const fragment = new URLSearchParams(location.hash.slice(1));
  for (const name of ["token", "session"]) {
    if (query.get(name) && !fragment.get(name)) fragment.set(name, query.get(name));
  }
  const rest = fragment.toString();
  history.replaceState(null, "", location.pathname + (rest ? `#${rest}` : ""));
}

/** The server's token: from the link's fragment (kept, and taken out of the address bar), or
 * as kept by an earlier visit; null when there is none (a server without auth needs none). */
function takeToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const given = params.get("token");
  if (given) {
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? `#${rest}` : ""));
    try { localStorage.setItem(TOKEN_KEY, given); } catch (error) { /* storage off: this tab only */ }
    return given;
  }
  try { return localStorage.getItem(TOKEN_KEY); } catch (error) { return null; }
}

/** MCP over HTTP: one POST per request, as the 2026-07-28 protocol has it. */
class HttpTransport {
  constructor() {
    this.nextId = 1;
    this.canReadResources = true;
    this.token = takeToken();
    this.refused = null; // the SignedOut the server answered with, until a token comes
    this.onRefused = () => {};
    this.wakers = new Set(); // the waits of this tab's streams before their next try
    this.lost = false; // whether the page's stream is lost (the server away)
  }

  /** A token to send from now on: the page asks again. */
  signIn(token) {
    this.token = token;
    this.refused = null;
    if (this.shared) this.shared.renew(); // its stream, if this tab holds it, ended refused
  }

  /** The server's refusal of the page (401: no token, or not its token; 403: it takes no
   * requests from this page) as a SignedOut that says what to do, else null. Said once, and
   * nothing is retried: a page left open asked every 1.5 s for good. */
  async refusal(response, sent) {
    if (response.status !== 401 && response.status !== 403) return null;
    // the answer to a token since replaced: the one now sent stands
    if (sent !== this.token) return new SignedOut(TOKEN_REFUSED, "Signed out");
    let error;
    if (response.status === 401) {
      // A token of an earlier start (a new one is made at each): forgotten, unless another
      // tab kept a newer one meanwhile (the new start's link opened there), which is taken
      // (a tab left open since the restart took it out of storage, signing that tab out).
      let kept = null;
      try { kept = localStorage.getItem(TOKEN_KEY); } catch (_) { /* storage off */ }
      if (kept === sent) {
        try { localStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ }
      }
      error = sent ? new SignedOut(TOKEN_REFUSED, "Signed out") : new SignedOut(SIGN_IN, "Not signed in");
      error.newer = kept && kept !== sent ? kept : null;
      this.token = null;
    } else {
      let message = "the server refuses requests from this page (HTTP 403)";
      try { message = (await response.json()).error.message || message; } catch (_) { /* not JSON-RPC */ }
      error = new SignedOut(message, "Refused by the server");
    }
    if (!this.refused) {
      this.refused = error;
      // the tabs' stream, if this tab holds it, goes to another tab, which may be signed in
      if (this.shared) this.shared.resign();
      this.onRefused(error);
    }
    return error;
  }

  envelope() {
    return {
      "io.modelcontextprotocol/protocolVersion": PROTOCOL,
      "io.modelcontextprotocol/clientInfo": APP_INFO,
      "io.modelcontextprotocol/clientCapabilities": {
        extensions: { [UI_EXTENSION]: { mimeTypes: [UI_MIME] } },
      },
    };
  }

  post(method, params, name, signal) {
    const id = this.nextId++;
    const headers = {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": PROTOCOL,
      "Mcp-Method": method,
    };
    if (name !== undefined) headers["Mcp-Name"] = name;
    const sent = this.token; // the token this request carries (null: none)
    if (sent) headers.Authorization = `Bearer ${sent}`;
    const body = { jsonrpc: "2.0", id, method, params: { ...params, _meta: this.envelope() } };
    return fetch("/mcp", {
      method: "POST", headers, body: JSON.stringify(body), credentials: "omit", signal,
    }).then((response) => ({ id, response, sent }), (error) => {
      if (error.name === "AbortError") throw error;
      // the browser's own words ("Failed to fetch") say nothing of what to do
      throw new ServerAway(`the server does not answer (${error.message}): is mcp-agent-sessions serve still running on ${location.host}?`);
    });
  }

  async request(method, params, name) {
    if (this.refused) throw this.refused;
    const { id, response, sent } = await this.post(method, params, name);
    const refused = await this.refusal(response, sent);
    if (refused) throw refused;
    // the server answers again (the reader's click): the stream is asked for now, not at its
    // next try, which may be seconds away
    if (this.lost && response.ok) this.retryNow();
    const type = response.headers.get("content-type") || "";
    let message = null;
    if (type.startsWith("text/event-stream")) {
      await readEvents(response, (data) => { if (data.id === id) message = data; });
    } else {
      message = await response.json();
    }
    if (!message) throw new Error(`no answer to ${method} (HTTP ${response.status})`);
    if (message.error) throw new Error(message.error.message);
    return message.result;
  }

  callTool(name, args) {
    return this.request("tools/call", { name, arguments: args }, name);
  }

  readResource(uri) {
    return this.request("resources/read", { uri }, uri);
  }

  /** Calls onEvent for each change until stopped; returns a function that stops. The tabs of
   * this page share one stream where the browser allows (SharedListen). */
  listen(filter, onEvent, onState) {
    if (this.shared === undefined) this.shared = SharedListen.available() ? new SharedListen(this) : null;
    return this.shared ? this.shared.listen(filter, onEvent, onState) : this.listenAlone(filter, onEvent, onState);
  }

  /** This tab's own stream: onEvent for each change until stopped. While the server does
   * not answer, the stream alone is asked again, ever less often (RETRY_FIRST to RETRY_MOST,
   * with jitter), and nothing else: the page asked for the stream, the list and the session
   * every 1.5 s for as long as the server was down. Heard again, the page reads what changed
   * ("reconnected") at once; a request that succeeds meanwhile (the reader's click), the
   * window shown again or "Try now" try at once (retryNow). */
  listenAlone(filter, onEvent, onState) {
    const controller = new AbortController();
    let stopped = false;
    let wake = null; // ends the wait before the next try
    const waker = () => { if (wake) wake(); };
    this.wakers.add(waker);
    const run = async () => {
      let failures = 0; // tries in a row that did not get the stream
      let lost = false; // a stream was lost (or never came): what changed is read once back
      while (!stopped && !this.refused) {
        try {
          const { response, sent } = await this.post("subscriptions/listen", { notifications: filter }, undefined, controller.signal);
          if (await this.refusal(response, sent)) { stopped = true; return; }
          if (!response.ok) throw new Error(`listen: HTTP ${response.status}`);
          await readEvents(response, (data) => {
            if (data.method === "notifications/subscriptions/acknowledged") {
              failures = 0;
              this.setLost(false);
              onState(true);
              if (lost) onEvent({ method: "reconnected" });
              lost = false;
            } else if (data.method) onEvent(data);
          });
        } catch (error) {
          if (stopped) return;
          failures++;
        }
        if (stopped) return;
        lost = true;
        this.setLost(true);
        onState(false);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, retryDelay(failures));
          wake = () => { clearTimeout(timer); resolve(); };
        });
        wake = null;
      }
    };
    run().finally(() => this.wakers.delete(waker));
    return () => { stopped = true; controller.abort(); waker(); };
  }

  /** Whether the page's stream is lost (this tab's, or the one another tab holds for it). */
  setLost(lost) {
    this.lost = lost;
  }

  /** Try for the stream now, in this tab and (``spread``) in the tab that holds it. */
  retryNow(spread = true) {
    for (const waker of [...this.wakers]) waker();
    if (spread && this.shared) this.shared.post({ type: "retry" });
  }
}

const RETRY_FIRST = 1000; // ms before the first try again, doubled at each failure in a row
const RETRY_MOST = 15000; // and never more than this

/** How long to wait before try ``failures + 1`` for the stream: doubling up to a bound, each
 * wait a random part of it (half to all), so the tabs of many readers do not ask in step. */
function retryDelay(failures) {
  const bound = Math.min(RETRY_MOST, RETRY_FIRST * 2 ** Math.max(0, failures - 1));
  return bound / 2 + Math.random() * (bound / 2);
}

/** One subscriptions/listen stream for all the tabs of this page. A browser opens at most six
 * connections to a host over HTTP/1.1, and each tab's stream held one: a seventh tab, and
 * every click in the six, waited for good. The tab holding a lock (Web Locks) listens, for
 * what every tab wants, and passes each change on to them (a BroadcastChannel); when it
 * closes, or the server refuses it (its token replaced, or gone), another takes the lock and
 * the stream; it asks for the lock again when signed in. Both need a secure context
 * (loopback is one): elsewhere each tab listens alone. */
class SharedListen {
  static available() {
    return Boolean(window.isSecureContext && navigator.locks && window.BroadcastChannel);
  }

  constructor(transport) {
    this.transport = transport;
    this.tab = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
    this.mine = null; // this tab's {filter, onEvent, onState}
    this.wants = new Map(); // the lead tab's: each tab's subscriptions
    this.leading = false;
    this.followed = false; // whether a stream was heard open (this tab's, or another's)
    this.tookOver = false; // (the lead tab) whether another tab's stream was heard first
    this.live = false; // (the lead tab) whether its stream is open
    this.streamKey = null;
    this.stopStream = null;
    this.channel = new BroadcastChannel("mcp-agent-sessions listen");
    this.channel.onmessage = (event) => this.receive(event.data);
    addEventListener("pagehide", () => this.post({ type: "want", tab: this.tab, uris: null }));
    this.queued = null; // the AbortController of this tab's request for the lock
    this.release = null; // (the lead tab) lets the lock go
    this.lead();
  }

  /** Ask for the lock (unless asked already): held, this tab listens for every tab. */
  lead() {
    if (this.queued || this.leading) return;
    const queued = new AbortController();
    this.queued = queued;
    navigator.locks.request("mcp-agent-sessions listen", { signal: queued.signal }, () => {
      this.leading = true;
      // taken over from another tab: what changed since its stream ended is read again
      this.tookOver = this.followed;
      this.post({ type: "hello" }); // the other tabs say what they want
      this.want(this.tab, this.uris());
      return new Promise((resolve) => { this.release = resolve; }); // held until resign
    }).catch(() => { /* the request withdrawn (resign) */ });
  }

  /** The server refused this tab: the stream it holds (it could not listen again) and its
   * place in the queue for the lock go to the other tabs, which heard nothing for good while
   * it held the lock refused. */
  resign() {
    if (this.queued && !this.leading) this.queued.abort();
    this.queued = null;
    if (!this.leading) return;
    this.leading = false;
    if (this.stopStream) this.stopStream();
    this.stopStream = null;
    this.streamKey = null;
    this.live = false;
    this.wants = new Map();
    this.post({ type: "state", on: false }); // until another tab listens
    this.release();
    this.release = null;
  }

  listen(filter, onEvent, onState) {
    const mine = { filter, onEvent, onState };
    this.mine = mine;
    this.announce();
    return () => {
      if (this.mine !== mine) return;
      this.mine = null;
      this.announce();
    };
  }

  uris() {
    return this.mine ? this.mine.filter.resourceSubscriptions || [] : null;
  }

  post(message) {
    this.channel.postMessage(message);
  }

  announce() {
    if (this.leading) this.want(this.tab, this.uris());
    else this.post({ type: "want", tab: this.tab, uris: this.uris() });
  }

  receive(message) {
    if (!message) return;
    if (message.type === "hello") this.announce();
    else if (message.type === "want" && this.leading) this.want(message.tab, message.uris);
    else if (message.type === "event") this.deliver(message.data);
    else if (message.type === "retry" && this.leading) this.transport.retryNow(false);
    else if (message.type === "state") {
      if (message.on) this.followed = true;
      this.transport.setLost(!message.on);
      if (this.mine) this.mine.onState(message.on);
    }
  }

  /** (the lead tab) ``tab`` wants ``uris`` (null: nothing, it stopped or closed) */
  want(tab, uris) {
    if (uris === null) this.wants.delete(tab); else this.wants.set(tab, uris);
    this.restream();
    // a tab that joins a stream already open hears that it is
    if (this.live) this.spread({ type: "state", on: true });
  }

  /** A token was given: the lead tab starts its stream anew with it; another (which may
   * have given the lock up, refused) asks for the lock. */
  renew() {
    if (!this.leading) {
      this.lead();
      return;
    }
    this.streamKey = undefined;
    this.restream();
  }

  /** (the lead tab) the stream for every tab's wants, started anew when they change */
  restream() {
    const uris = [...new Set([...this.wants.values()].flat())].sort();
    const key = this.wants.size ? JSON.stringify(uris) : null;
    if (key === this.streamKey) return;
    if (this.stopStream) this.stopStream();
    this.stopStream = null;
    this.streamKey = key;
    this.live = false;
    if (key === null) return;
    let first = true;
    this.stopStream = this.transport.listenAlone(
      { resourcesListChanged: true, resourceSubscriptions: uris },
      (data) => this.spread({ type: "event", data }),
      (on) => {
        this.live = on;
        this.spread({ type: "state", on });
        // what changed while the stream was being started anew is read again
        if (on && first && (this.wants.size > 1 || this.tookOver)) this.spread({ type: "event", data: { method: "reconnected" } });
        if (on) first = false;
      },
    );
  }

  /** (the lead tab) to every tab, itself included */
  spread(message) {
    this.post(message);
    this.receive(message);
  }

  /** A change, to this tab's listener if it is one it listens for. */
  deliver(data) {
    const mine = this.mine;
    if (!mine) return;
    if (data.method === "notifications/resources/updated") {
      if (!(mine.filter.resourceSubscriptions || []).includes(data.params && data.params.uri)) return;
    } else if (data.method === "notifications/resources/list_changed" && !mine.filter.resourcesListChanged) return;
    mine.onEvent(data);
  }
}

/** Server-sent events from a fetch response, each data line parsed as JSON. */
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = event.split(/\r?\n/).filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("\n");
      if (data) {
        try { onData(JSON.parse(data)); } catch (_) { /* not JSON: not ours */ }
      }
    }
  }
}

/** The MCP Apps protocol: JSON-RPC 2.0 with the host over postMessage. */
class AppTransport {
  constructor(onNotification) {
    this.nextId = 1;
    this.pending = new Map();
    this.onNotification = onNotification;
    this.hostCapabilities = {};
    this.hostContext = {};
    window.addEventListener("message", (event) => this.receive(event));
  }

  get canReadResources() {
    return Boolean(this.hostCapabilities.serverResources);
  }

  send(message) {
    window.parent.postMessage(message, "*");
  }

  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  notify(method, params) {
    this.send({ jsonrpc: "2.0", method, params });
  }

  receive(event) {
    if (event.source !== window.parent) return;
    const message = event.data;
    if (!message || message.jsonrpc !== "2.0") return;
    if (message.id !== undefined && !message.method) {
      const waiting = this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      if (message.error) waiting.reject(new Error(message.error.message));
      else waiting.resolve(message.result);
      return;
    }
    if (message.method === "ui/resource-teardown" || message.method === "ping") {
      this.send({ jsonrpc: "2.0", id: message.id, result: {} });
      return;
    }
    if (message.id !== undefined) {
      this.send({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: `${message.method} is not handled by this view` } });
      return;
    }
    this.onNotification(message);
  }

  async connect() {
    const result = await this.request("ui/initialize", {
      appInfo: APP_INFO,
      appCapabilities: { availableDisplayModes: ["inline", "fullscreen"] },
      protocolVersion: APPS_PROTOCOL,
    });
    this.hostCapabilities = result.hostCapabilities || {};
    this.hostContext = result.hostContext || {};
    this.notify("ui/notifications/initialized", {});
    return result;
  }

  callTool(name, args) {
    // A host that does not proxy tool calls (no serverTools) may never answer one: the view
    // waited on "Waiting for the tool's result…" for good.
    if (!this.hostCapabilities.serverTools) {
      return Promise.reject(new Error("This host does not pass the view's tool calls to the server"
        + " (it offers no serverTools), and the view reads the session through them: read it with"
        + " session_get, or in the page that mcp-agent-sessions serve --transport http serves."));
    }
    return this.request("tools/call", { name, arguments: args });
  }

  readResource(uri) {
    return this.request("resources/read", { uri });
  }
}

let transport;

/** A tool's structured result, or a ToolFailed with the tool's own words. */
async function tool(name, args) {
  const result = await transport.callTool(name, args);
  if (result.isError) {
    const text = (result.content || []).map((block) => block.text || "").join(" ");
    throw new ToolFailed(text || `${name} failed`);
  }
  return result.structuredContent;
}

// --- state ---------------------------------------------------------------------------------

const state = {
  sessionId: null,
  view: null, // the last session_get answer's session and leaf
  outline: [], // rows of the main outline, oldest first
  earlierCursor: null,
  opened: new Map(), // branch head id -> its outline rows (opened off-branch subtrees)
  openedEarlier: new Map(), // branch head id -> the cursor of its rows not read yet
  unfolded: new Map(), // id of the row before a fold -> entries revealed (rows)
  selected: null,
  tabStop: null, // the one row Tab goes to (the last focused); arrows go between the rest
  listStop: null, // the session whose option in the list Tab goes to (the last focused)
  entry: null,
  reading: null, // the entry whose read is under way (selectEntry)
  saidFolded: null, // the entry the address named, said to be in a fold left folded
  sessionsCursor: null,
  query: "",
  listedQuery: null, // the search of the list shown
  run: null,
};

// --- small helpers --------------------------------------------------------------------------

// Bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069) would make text read
// otherwise than it is ("run \u202erm -rf /" shows as "run / fr- mr"): they are shown as
// escapes, as the server's outline previews show them. Marks (U+200E, U+200F) stay.
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;

/** ``text`` as the page shows what a session holds. */
function shown(text) {
  return String(text).replace(BIDI_CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}

function h(tag, props, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") element.className = value;
    else if (key === "text") element.textContent = shown(value);
    // a title shows on hover: session text there is shown as everywhere else
    else if (key === "title") element.setAttribute("title", shown(value));
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(shown(child)));
  }
  return element;
}

let toastTimer = null;
function toast(text, isError) {
  const box = $("toast");
  box.textContent = text;
  box.className = isError ? "toast error" : "toast";
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { box.hidden = true; }, isError ? 6000 : 2500);
}

function failed(error) {
  if (error instanceof SignedOut) return; // said where the page's content was (signedOut)
  // Every call but the list's is about the open session: refused as gone, the page says so.
  if (state.sessionId && saysGone(error)) { sessionGone(state.sessionId); return; }
  toast(error.message || String(error), true);
}

/** Whether the server says the session asked about is not there (deleted, or never was): by
 * the error's kind, not by the id, which it cuts when long and escapes when it holds control
 * characters, and however it says it ("not found", "was deleted": another process deleted
 * it while this server had it open). */
function saysGone(error) {
  return error instanceof ToolFailed && /^(?:\w+: )?not_found: session /.test(error.message);
}

/** A page of earlier rows refused because the outline changed since its cursor was handed
 * out (the row before the cursor is another now: the leaf moved to another branch, or the
 * rows were folded anew): read the outline again, which hands out cursors of it as it is. */
function changedOrFailed(error) {
  if (error instanceof ToolFailed && error.message.includes("may have changed since")) return refresh();
  failed(error);
}

function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const seconds = (Date.now() - date.getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return date.toLocaleDateString(undefined, { year: "numeric", month: "short", day: "numeric" });
}

function plural(count, word) {
  return `${COUNT.format(count)} ${word}${count === 1 ? "" : "s"}`;
}

/** ``text`` on one line, cut to ``limit`` characters: by characters (code points), as the
 * server cuts, not by UTF-16 units (an emoji at the cut was split, shown as "�"). */
function clip(text, limit) {
  const flat = String(text).split(/\s+/).filter(Boolean).join(" ");
  if (flat.length <= limit) return flat;
  const chars = Array.from(flat.slice(0, 2 * limit + 2)); // more than limit, if there are
  return chars.length <= limit ? flat : chars.slice(0, limit - 1).join("") + "…";
}

function contentText(content) {
  if (typeof content === "string") return content;
  return (content || []).filter((block) => block.type === "text").map((block) => block.text).join("\n");
}

/** A row like the outline's, for an entry read whole (an unfolded one): mirrors the
 * server's one-line account of an entry (sessions/outline.py). */
function rowOf(entry, onBranch) {
  let kind = "meta";
  let preview = entry.type;
  const message = entry.message;
  if (entry.type === "message" && message) {
    const text = clip(contentText(message.content), 120);
    if (message.role === "user") { kind = "user"; preview = `user: ${text}`; }
    else if (message.role === "assistant") {
      const failedRun = message.stopReason === "error" || message.stopReason === "aborted";
      kind = failedRun ? "error" : "assistant";
      const calls = (message.content || []).filter((block) => block.type === "toolCall").map((block) => block.name);
      preview = `assistant:${text ? " " + text : ""}${calls.length ? " → " + calls.join(", ") : ""}`;
    } else if (message.role === "toolResult") {
      kind = message.isError ? "error" : "toolResult";
      preview = `${message.toolName} result: ${text}`;
    } else { preview = `${message.role}: ${text}`; }
  } else if (entry.type === "model_change") preview = `model → ${entry.provider}:${entry.modelId}`;
  else if (entry.type === "thinking_level_change") preview = `thinking → ${entry.thinkingLevel}`;
  else if (entry.type === "label") preview = entry.label ? `label ${entry.targetId} = '${entry.label}'` : `label ${entry.targetId} cleared`;
  else if (entry.type === "custom") preview = `custom ${entry.customType}`;
  else if (entry.type === "compaction" || entry.type === "branch_summary") { kind = "summary"; preview = clip(entry.summary || "", 120); }
  return {
    id: entry.id, parentId: entry.parentId, type: entry.type, timestamp: entry.timestamp,
    // escaped as the server's previews are, for whatever shows it
    children: [], childCount: 0, label: null, onBranch, preview: shown(preview), kind, spine: true, folded: 0,
  };
}

const KIND_NAMES = {
  user: "user", assistant: "assistant", toolResult: "tool", error: "error", call: "call",
  summary: "summary", custom: "custom", meta: "meta",
};

function kindName(row) {
  if (row.type === "compaction") return "compaction";
  if (row.type === "branch_summary") return "branch summary";
  if (row.kind === "meta") return row.type.replace(/_/g, " ").replace(/ change$/, "");
  return KIND_NAMES[row.kind] || row.kind;
}

/** The preview without the role the badge already says. */
function previewText(row) {
  const text = row.preview || "";
  const colon = text.indexOf(": ");
  if (row.kind === "meta" || colon < 0 || colon > 40) return text;
  return text.slice(colon + 2) || text;
}

// --- sessions -------------------------------------------------------------------------------

// Lists asked for, and the one shown (or on its way): only the newest answer is shown. A
// search's answer that came after a later one's (a wider search is slower) showed the
// sessions of words no longer in the box.
let sessionsAsked = 0;
let sessionsFresh = 0; // the newest list asked for from its start
let sessionsShown = 0; // the newest list shown from its start
// The query whose "More sessions" was pressed and is not shown yet: pressed while the list
// was being read again (at the stream's opening, at a change), it was dropped without a word.
let moreWanted = null;

async function loadSessions(more) {
  if (more) moreWanted = state.query;
  // more of a list not yet come: asked for once it has (its own answer says whether there is more)
  if (more && sessionsShown !== sessionsFresh) return;
  const asked = ++sessionsAsked;
  if (!more) sessionsFresh = asked;
  const query = state.query;
  // The list read again (a live update: every append of an agent's run) reads as many as it
  // shows, or what "More sessions" showed fell off at each change.
  const shown = $("sessions").querySelectorAll(".session").length;
  const wanted = !more && query === state.listedQuery ? Math.max(SESSIONS_PAGE, shown) : SESSIONS_PAGE;
  let sessions = [];
  let cursor = more ? state.sessionsCursor : null;
  try {
    do { // pages stop at about 40 KB, and at most 500 sessions
      const args = { limit: Math.min(500, wanted - sessions.length) };
      if (query) args.query = query;
      if (cursor) args.cursor = cursor;
      const answer = await tool("session_list", args);
      sessions = [...sessions, ...answer.sessions];
      cursor = answer.nextCursor;
    } while (cursor && sessions.length < wanted);
  } catch (error) {
    if (asked !== sessionsAsked || error instanceof SignedOut) return;
    if (!more) sessionsShown = asked;
    moreWanted = null;
    // The list read again as the server went away (a change heard just before, the stream's
    // opening): the list shown stays, as the session does, and is read again once the server
    // is back; the note in its place said the server was away where the line over it does.
    if (error instanceof ServerAway && query === state.listedQuery && $("sessions").querySelector(".session")) {
      if (more) throw error;
      return;
    }
    $("sessions").replaceChildren(listNote(error.message));
    $("more-sessions").hidden = true;
    return;
  }
  if (asked !== sessionsAsked) return;
  if (!more) {
    sessionsShown = asked;
    state.listedQuery = query;
  }
  // Options of a listbox: one Tab stop for the list, the arrows between them (a button each
  // was a Tab stop each: 50 and more Tabs to get past the list).
  const items = sessions.map((info) => h("li", {
    class: info.id === state.sessionId ? "session current" : "session",
    role: "option", tabindex: "-1",
    "aria-selected": String(info.id === state.sessionId),
    dataset: { session: info.id },
    onclick: () => openSession(info.id, true).catch(failed),
  },
  // cut to the list's width: shown whole on hover
  h("span", { class: "session-name", text: info.name || info.firstUserMessage || "(empty session)", title: info.name || info.firstUserMessage || null }),
  h("span", { class: "session-meta", text: [when(info.modified), plural(info.messageCount, "message"), origin(info)].filter(Boolean).join(" · ") })));
  if (more) {
    // "More sessions" pressed: the focus goes to the first of them (it went to the page's
    // body when the button hid, at the list's end, or stayed below what it showed)
    const pressed = document.activeElement === $("more-sessions");
    $("sessions").append(...items);
    keepListStop();
    if (pressed && items.length) items[0].focus();
  } else {
    // The list drawn anew (at every append of an agent's run) left the focus on the page's
    // body: a keyboard reader in the list lost their place at each. It stays on its session.
    // (Its session deleted meanwhile, the focus goes to the one now in its place: it went
    // to the page's body.)
    const active = document.activeElement;
    const inList = active instanceof HTMLElement && $("sessions").contains(active);
    const place = inList ? [...$("sessions").children].indexOf(active) : -1;
    // merged into the list shown, each session's option kept (drawn anew, every option was
    // a new element at each update, a new list to a screen reader)
    const drawn = h("ol", {}, items);
    if (!items.length) drawn.append(listNote(state.query ? "No session matches." : "No sessions yet."));
    morphChildren($("sessions"), drawn);
    const focused = inList && active.dataset.session;
    const again = (focused && $("sessions").querySelector(`.session[data-session="${CSS.escape(focused)}"]`))
      || (inList ? $("sessions").children[Math.min(place, $("sessions").children.length - 1)] : null);
    if (again) state.listStop = again.dataset.session || null;
    keepListStop();
    if (again) again.focus({ preventScroll: true });
  }
  state.sessionsCursor = cursor;
  $("more-sessions").hidden = !cursor;
  if (more) moreWanted = null;
  else if (moreWanted !== null) {
    const again = moreWanted === query && cursor;
    moreWanted = null;
    if (again) loadSessions(true).catch(failed);
  }
}

/** Where a session of the list came from, short: a fork listed as its parent was, the same
 * name, time and messages (told apart only by opening each), and a sub-agent's session. */
function origin(info) {
  if (info.startedBy) return `a sub-agent's, started by ${parentName(info.startedBy.sessionId)}`;
  if (info.parentSession) return `forked from ${parentName(info.parentSession)}`;
  return "";
}

/** What the list says in place of sessions (none, refused, not signed in): an option that
 * cannot be chosen, so that the listbox still has its one Tab stop, which reads it. */
function listNote(text) {
  return h("li", { class: "empty", role: "option", tabindex: "0", "aria-disabled": "true", "aria-selected": "false", text });
}

/** One option of the list takes Tab, as a listbox's does: the last focused, else the open
 * session's, else the first. */
function keepListStop() {
  const list = $("sessions");
  const options = [...list.querySelectorAll('[role="option"]')];
  const stop = options.find((option) => option.dataset.session === state.listStop && state.listStop)
    || options.find((option) => option.dataset.session === state.sessionId && state.sessionId)
    || options[0];
  for (const option of options) option.tabIndex = option === stop ? 0 : -1;
}

/** The list by keyboard, as a listbox goes: Up and Down (Home, End, Page Up and Page Down)
 * move between the sessions, a letter to the next whose name starts with it, Enter or Space
 * opens the one focused. */
let typed = "";
let typedTimer = null;
function listKeys(event) {
  const option = event.target;
  if (!(option instanceof HTMLElement) || option.getAttribute("role") !== "option") return;
  const options = [...$("sessions").querySelectorAll('[role="option"]')];
  const at = options.indexOf(option);
  const moves = {
    ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: options.length - 1,
    PageDown: Math.min(at + 10, options.length - 1), PageUp: Math.max(at - 10, 0),
  };
  let next = null;
  if (event.key in moves) next = options[moves[event.key]];
  else if (event.key === "Enter" || event.key === " ") {
    if (option.dataset.session) openSession(option.dataset.session, true).catch(failed);
  } else if (event.key.length === 1 && !event.ctrlKey && !event.metaKey && !event.altKey && event.key.trim()) {
    // type-ahead: the next session whose name starts with what was typed
    clearTimeout(typedTimer);
    typedTimer = setTimeout(() => { typed = ""; }, 700);
    typed += event.key.toLowerCase();
    const name = (element) => (element.querySelector(".session-name") || element).textContent.toLowerCase();
    const order = [...options.slice(at + (typed.length === 1 ? 1 : 0)), ...options.slice(0, at + 1)];
    next = order.find((element) => element.dataset.session && name(element).startsWith(typed)) || null;
    if (!next) return;
  } else return;
  event.preventDefault();
  if (next) next.focus();
}

// --- one session ----------------------------------------------------------------------------

/** The open session's option in the list, marked so (for a screen reader too: it heard no
 * session of the list open, the mark being a colour alone): selected. */
function markCurrent() {
  for (const option of document.querySelectorAll(".session")) {
    const open = option.dataset.session === state.sessionId;
    option.classList.toggle("current", open);
    option.setAttribute("aria-selected", String(open));
  }
}

/** Where the tab is, as its address says it: ``#session=…``, and ``&entry=…`` once the reader
 * opened an entry of it, so that Back, Forward and a reload open that entry again (they
 * showed the session with none open: the reader's place was lost). */
function placeAddress(sessionId, entryId) {
  const entry = entryId ? `&entry=${encodeURIComponent(entryId)}` : "";
  return `#session=${encodeURIComponent(sessionId)}${entry}`;
}

/** Show session ``sessionId`` (with entry ``entryId`` open, the one its address names);
 * opened by the reader (``byReader``: a click in the list, a fork), it is a step of the tab's
 * history, which Back goes back through (each step replaced the last: Back left the page). */
async function openSession(sessionId, byReader = false, entryId = null) {
  const firstOpen = state.sessionId !== sessionId;
  if (firstOpen) {
    state.sessionId = sessionId;
    state.outline = [];
    state.opened = new Map();
    state.openedEarlier = new Map();
    state.unfolded = new Map();
    // read and shown once the tree is (readAgain)
    state.selected = entryId || null;
    state.tabStop = null;
    state.entry = null;
    state.view = null;
    state.saidFolded = null;
    $("detail-where").hidden = true;
    $("detail").hidden = true;
    $("detail").parentElement.classList.add("solo");
    if (TRANSPORT === "http") {
      const address = placeAddress(sessionId, entryId);
      if (byReader) history.pushState(null, "", address); else history.replaceState(null, "", address);
    }
    markCurrent();
  }
  // Listening first, read once the stream is open (or is not to be had): read first, a change
  // made before the stream opened (an agent's last append, a delete) sent it nothing, and was
  // never shown while the dot said live.
  if (TRANSPORT === "http" && !transport.refused) await new Promise((ready) => watchSession(sessionId, ready));
  if (state.sessionId === sessionId) await refresh();
  // the entry the address named, brought into view in the tree
  if (firstOpen && entryId && state.sessionId === sessionId && state.selected === entryId) {
    const rowOfEntry = () => $("tree").querySelector(`.row[data-id="${CSS.escape(entryId)}"]`);
    if (!rowOfEntry()) await unfoldTo(entryId);
    const row = rowOfEntry();
    if (row && state.selected === entryId) {
      row.scrollIntoView({ block: "nearest" });
      // and Tab into the tree goes to it (it went to the first row: the tree was drawn before
      // the fold was unfolded), unless the reader is in the tree already
      if (!$("tree").contains(document.activeElement)) moveTabStop(row);
    }
  }
}

/** Unfold the fold that holds entry ``entryId`` down to it: an address naming an entry inside
 * a fold showed the entry, but nowhere in the tree. Its path is read up from it to the first
 * row shown; when a fold follows that row, the entries between are the fold's lowest. */
async function unfoldTo(entryId) {
  const sessionId = state.sessionId;
  let above = 0; // the entries between the row shown and the entry
  let cursor = null;
  // read up at most UNFOLD_TO_MOST entries (and the entry, and the row shown above them)
  while (above <= UNFOLD_TO_MOST) {
    const args = { session_id: sessionId, entry_id: entryId, limit: Math.min(ENTRIES_PAGE, UNFOLD_TO_MOST + 2 - above) };
    if (cursor) args.cursor = cursor;
    const answer = await tool("session_get", args);
    if (sessionId !== state.sessionId) return;
    for (const entry of [...answer.entries].reverse()) {
      if (entry.id === entryId) continue;
      if (rowShown(entry.id)) { // a row of a chain, or the head of a branch not opened
        const anchor = (findChain(entry.id) || []).find((row) => row.id === entry.id);
        if (!anchor || anchor.folded <= above) return;
        // from the entry down to the fold's end: too many rows, it is left folded
        if (anchor.folded - above > UNFOLD_TO_MOST) { sayFolded(entryId, anchor.folded - above - 1); return; }
        await inTurn(() => unfold(anchor.id, anchor.folded - above, true));
        return;
      }
      above += 1;
    }
    cursor = answer.nextCursor;
    if (!cursor) return;
  }
  sayFolded(entryId, null); // more than UNFOLD_TO_MOST entries down a fold
}

/** Say, above the entry ``entryId`` the address named, that it is in a fold left folded
 * (``below``: how many entries of the fold follow it, if known which). */
function sayFolded(entryId, below) {
  if (state.selected !== entryId) return;
  // (not known which fold, past the bound: or a branch not opened, as deep below its head)
  const where = below === null
    ? `more than ${COUNT.format(UNFOLD_TO_MOST)} entries below the row shown above it, in a fold (⋯ more entries) or a branch not opened`
    : `inside a fold (⋯ more entries), ${COUNT.format(below)} entries up from its end`;
  const note = $("detail-where");
  note.textContent = `In the tree, this entry is ${where}: too far to unfold to.`;
  note.hidden = false;
  state.saidFolded = entryId;
}

/** The server refused the page (``error``, a SignedOut): said in place of the list and the
 * session, with what to do; nothing is asked again until a token comes (a link pasted into
 * this tab, or another tab of this page signed in), when the page picks up where it was. */
function signedOut(error) {
  if (stopListening) { stopListening(); stopListening = null; }
  showLive(false, "not signed in");
  $("sessions").replaceChildren(listNote(`${error.title}.`));
  $("more-sessions").hidden = true;
  Object.assign(state, { view: null, entry: null });
  $("detail").hidden = true;
  $("detail").parentElement.classList.add("solo");
  $("session-name").textContent = error.title;
  $("session-name").title = "";
  $("session-id").textContent = "";
  $("session-facts").replaceChildren();
  $("prompt").hidden = true;
  $("tree").replaceChildren(h("div", { class: "empty signed-out", text: error.message }));
  // another tab kept a newer token than the one refused here: taken at once
  if (error.newer) {
    const resumed = signIn(error.newer);
    if (resumed) resumed.catch(failed);
  }
}

/** The list, and the session the address names (or the one open before a sign-in); with no
 * session, the list alone, listening for its changes. */
async function begin() {
  const address = new URLSearchParams(location.hash.slice(1));
  const wanted = address.get("session") || state.sessionId;
  const listed = loadSessions(false);
  if (wanted) {
    await Promise.all([listed, openSession(wanted, false, address.get("session") ? address.get("entry") : null)]);
    return;
  }
  await listed;
  if (transport.refused) return;
  // (in place of what a refusal said: "Not signed in" stood over the list signed in)
  notShown("", "No session open", "Pick a session from the list.");
  listenForList();
}

/** With no session open, list changes are heard. */
function listenForList() {
  if (stopListening) stopListening();
  // the list, read before the stream opened, is read again once it is
  const heard = () => loadSessions(false);
  stopListening = transport.listen({ resourcesListChanged: true }, heard, listening(heard));
}

/** The address names no session (Back to where the tab started): none is shown. */
function closeSession() {
  if (!state.sessionId) return;
  notShown("", "No session open", "Pick a session from the list.");
  state.sessionId = null;
  markCurrent();
  listenForList();
}

/** A token came (a link pasted into this tab, or another tab signed in): asked again. */
function signIn(token) {
  const wasRefused = transport.refused;
  transport.signIn(token);
  if (wasRefused) {
    state.view = null; // drawn anew, not as a live update of what was shown before
    return begin();
  }
  return null;
}

/** The open session is gone (deleted by another client, or a link's id that never was): the
 * page says so instead of showing what it no longer is, and listens for the list alone. */
function sessionGone(sessionId) {
  if (state.sessionId !== sessionId) return;
  // the App has no list of sessions to pick from
  const pick = TRANSPORT === "http" ? " Pick one from the list." : "";
  notShown(sessionId, "Session not found", `This session is not here (deleted, or never was).${pick}`);
  state.sessionId = null;
  markCurrent();
  if (TRANSPORT !== "http") return;
  history.replaceState(null, "", location.pathname);
  listenForList();
}

/** Session ``sessionId`` is not shown: ``title`` in the head and ``text`` where its tree would
 * be, in place of what was shown (another session, or the App's wait for a result). */
function notShown(sessionId, title, text) {
  Object.assign(state, { view: null, selected: null, entry: null });
  $("detail").hidden = true;
  $("detail").parentElement.classList.add("solo");
  $("session-name").textContent = title;
  $("session-name").title = "";
  // the id as a link had it: shown as session text is, and cut (a link can hold anything)
  $("session-id").textContent = shown(clip(sessionId, 100));
  $("session-facts").replaceChildren();
  $("prompt").hidden = true;
  $("tree").replaceChildren(h("div", { class: "empty", text }));
}

let turn = Promise.resolve(); // the last change of the rows read, queued or under way

/** Run ``change`` (what reads rows into the tree: a live update's refresh, a click on a fold,
 * a branch or "Show earlier") once those queued before it are done. Run at once, each wrote
 * the rows it had read over those the other had read meanwhile: a fold clicked while an
 * update read it again was shown folded back, the click lost. */
function inTurn(change) {
  const run = turn.then(change);
  turn = run.catch(() => {});
  return run;
}

let refreshQueued = null; // the refresh queued and not begun, for every change heard meanwhile

/** Read the outline again (``readAgain``) in turn: asked for while one waits its turn, it is
 * that one, however many asked (with an append every 0.5 s, refreshes overlapped: 18 reads
 * at once, each drawing the tree over the others). */
function refresh() {
  if (!refreshQueued) {
    refreshQueued = inTurn(() => {
      refreshQueued = null;
      return readAgain();
    });
  }
  return refreshQueued;
}

/** Read the outline again, with every branch the reader opened and every fold unfolded. */
async function readAgain() {
  const sessionId = state.sessionId;
  if (!sessionId) return;
  let read;
  try {
    // as many rows as the reader had shown ("show earlier" included), and the new ones
    // the rows added since count too, or the earliest shown would fall off the end
    const shown = state.outline.length;
    const before = state.view && state.view.session.id === sessionId ? state.view.total : null;
    read = await readOutline({ session_id: sessionId, view: "outline" }, (first) =>
      before === null ? OUTLINE_PAGE : Math.max(OUTLINE_PAGE, shown + Math.max(0, first.total - before)));
  } catch (error) {
    if (error instanceof SignedOut) return; // said in place of the page (signedOut)
    if (saysGone(error)) sessionGone(sessionId);
    // Refused before anything of it was shown (the server busy, the host refusing the
    // call): said where it would be, not in a passing toast over what was there before.
    else if (!state.view && state.sessionId === sessionId) {
      // the entry the address names stays wanted: opened by the next read (at a change), not
      // forgotten while the address still named it
      const wanted = state.selected;
      notShown(sessionId, "Could not read this session", error.message || String(error));
      state.selected = wanted;
    } else failed(error);
    return;
  }
  if (sessionId !== state.sessionId) return;
  state.view = read.answer;
  state.outline = read.rows;
  state.earlierCursor = read.cursor;
  // the branches still open: those whose heads are still shown (a moved leaf makes one the chain)
  const wasOpen = state.opened;
  state.opened = new Map();
  state.openedEarlier = new Map();
  let heads = headsOf(state.outline).filter((id) => wasOpen.has(id));
  while (heads.length) {
    await Promise.all(heads.map((id) => openBranch(id, false, wasOpen.get(id).length)));
    heads = heads.flatMap((id) => headsOf(state.opened.get(id) || [])).filter((id) => wasOpen.has(id));
  }
  await Promise.all([...state.unfolded.entries()].map(([id, rows]) => unfold(id, rows.length, false)));
  renderHead();
  renderTree();
  if (state.selected && state.entry && state.entry.id === state.selected) {
    // An entry never changes once written: only what is said about it (the leaf) is drawn
    // again, not its content, which may be megabytes.
    markSelected(state.selected);
    renderDetail(state.entry, false);
  } else if (state.selected && state.reading !== state.selected) {
    const wanted = state.selected;
    try {
      await selectEntry(wanted, false);
    } catch (error) {
      // an entry the address named that this session does not hold: the session alone,
      // not a toast at every live update for it
      if (!(error instanceof ToolFailed && /^(?:\w+: )?not_found: entry /.test(error.message))) throw error;
      if (state.selected !== wanted || state.sessionId !== sessionId) return;
      state.selected = null;
      markSelected(null);
      if (TRANSPORT === "http") history.replaceState(history.state, "", placeAddress(sessionId, null));
    }
  }
}

function headsOf(rows) {
  return rows.filter((row) => !row.spine).map((row) => row.id);
}

/** The page of rows before those shown, in turn: read while a live update made the rows and
 * their cursors anew, the page of the cursor from before it (or of none) was put before rows
 * that held it already, shown twice. */
function loadEarlier() {
  return inTurn(async () => {
    const sessionId = state.sessionId;
    if (!state.earlierCursor) return;
    const answer = await tool("session_get", {
      session_id: sessionId, view: "outline", limit: OUTLINE_PAGE, cursor: state.earlierCursor,
    });
    if (sessionId !== state.sessionId) return; // another session opened meanwhile
    state.outline = [...answer.outline, ...state.outline];
    state.earlierCursor = answer.nextCursor;
    prependRows(answer.outline.filter((row) => row.spine).length);
  });
}

/** The parent a header names, short: an id's first 8 characters. pi names the parent's file
 * (".../2026-01-01T10-00-00-000Z_<id>.jsonl"): the id in its name, else the name cut. */
function parentName(parent) {
  const name = parent.split(/[\\/]/).pop() || parent;
  const id = name.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i);
  if (id) return id[0].slice(0, 8);
  return shown(name.length > 40 ? `${name.slice(0, 40)}…` : name);
}

function renderHead() {
  const info = state.view.session;
  $("session-name").textContent = shown(info.name || info.firstUserMessage || "Untitled session");
  // a name longer than the head's line is cut there: its whole on hover (it could not be read)
  $("session-name").title = $("session-name").textContent;
  $("session-id").textContent = shown(info.id);
  const facts = [
    plural(info.messageCount, "message"),
    plural(info.entryCount, "entry").replace("entrys", "entries"),
    `updated ${when(info.modified)}`,
  ];
  if (info.cwd) facts.push(shown(info.cwd));
  const origin = info.startedBy;
  if (origin) {
    const run = origin.runId ? ` (run ${shown(origin.runId)})` : "";
    facts.push(`a sub-agent's session, started by ${parentName(origin.sessionId)}${run}`);
  } else if (info.parentSession) facts.push(`forked from ${parentName(info.parentSession)}`);
  $("session-facts").replaceChildren(...facts.map((fact) => h("span", { text: fact })));
  $("prompt").hidden = false;
}

/** An outline's rows arranged: its spine rows in order, the heads of the branches off each
 * (by the spine row's id), and the heads whose parent is not on the spine (``loose``). */
function arrange(rows) {
  // Sets and maps, not a search of the rows for each row: that was quadratic, seconds at
  // 20,000 rows.
  const spine = rows.filter((row) => row.spine);
  const onSpine = new Set(spine.map((row) => row.id));
  const heads = new Map();
  const loose = [];
  for (const row of rows) {
    if (row.spine) continue;
    if (!onSpine.has(row.parentId)) loose.push(row);
    else if (heads.has(row.parentId)) heads.get(row.parentId).push(row);
    else heads.set(row.parentId, [row]);
  }
  return { spine, heads, loose };
}

/** The rows of one outline as a tree: spine rows in order, each followed by the heads of
 * the branches off it (opened ones with their own outline nested). */
function renderRows(rows, headId, level) {
  const { spine, heads, loose } = arrange(rows);
  const list = document.createDocumentFragment();
  list.append(renderLoose(loose, level), renderSpine(spine, heads, 0, spine.length, level, headId));
  return list;
}

/** Heads whose parent is not on the chain: other roots (the outline from the root) as they
 * are; the rest branch off an entry not read yet (behind "Show earlier"), under a line that
 * stands for it, not drawn as roots of their own. */
function renderLoose(loose, level) {
  const list = document.createDocumentFragment();
  const byParent = new Map();
  for (const head of loose) {
    if (head.parentId === null || head.parentId === undefined) list.append(renderHeadRow(head, level));
    else if (byParent.has(head.parentId)) byParent.get(head.parentId).push(head);
    else byParent.set(head.parentId, [head]);
  }
  for (const [parentId, heads] of byParent) {
    list.append(h("div", { class: "elided", dataset: { elided: parentId } },
      h("div", {
        class: "elided-parent", role: "treeitem", tabindex: "-1", "aria-level": String(level),
        title: "An earlier entry, not read yet: Show earlier entries",
      },
        h("span", { class: "dot" }), h("span", { class: "id", text: parentId }),
        h("span", { class: "text", text: `an earlier entry: ${plural(heads.length, "branch").replace("branchs", "branches")} of it below` })),
      heads.map((head) => renderHeadRow(head, level))));
  }
  return list;
}

/** Spine rows ``spine[from:to]`` with their folds and branches (``heads`` by parent id), at
 * depth ``level`` of the tree (1: the chain; a branch is a level down from its row). */
function renderSpine(spine, heads, from, to, level, headId) {
  const list = document.createDocumentFragment();
  for (let index = from; index < to; index++) {
    const row = spine[index];
    list.append(renderRow(row, row.id === headId, level));
    if (row.folded) list.append(renderFold(row, level));
    for (const head of heads.get(row.id) || []) list.append(renderHeadRow(head, level));
  }
  return list;
}

/** The fold after spine row ``row``: what is unfolded, and a button for the rest; in a box
 * of its own, drawn again alone when more is unfolded. */
function renderFold(row, level) {
  const box = h("div", { class: "folds", dataset: { anchor: row.id } });
  const revealed = state.unfolded.get(row.id) || [];
  const hidden = row.folded - revealed.length;
  if (hidden > 0) {
    // a tree item, as all a tree holds (a button there was skipped, or misread, by a screen
    // reader going through the tree), named by what it hides
    box.append(h("div", {
      class: "fold", role: "treeitem", tabindex: "-1", "aria-level": String(level),
      dataset: { fold: row.id }, title: "Show the entries in between",
    }, h("span", { "aria-hidden": "true", text: "⋯" }), ` ${COUNT.format(hidden)} more ${hidden === 1 ? "entry" : "entries"}`));
  }
  for (const shown of revealed) box.append(renderRow(shown, false, level));
  return box;
}

/** The first entry of a branch off a row at depth ``level``: unopened, or opened with its
 * own outline, a level down. */
function renderHeadRow(head, level) {
  const opened = state.opened.get(head.id);
  const dataset = { head: head.id };
  const down = level + 1;
  if (!opened) return h("div", { class: "nest", dataset }, renderRow(head, true, down));
  if (!state.openedEarlier.has(head.id)) return h("div", { class: "nest open", dataset }, renderRows(opened, head.id, down));
  // a branch longer than what was read: its head (to close it), then its earlier rows on demand
  return h("div", { class: "nest open", dataset },
    renderRow(head, true, down),
    h("div", {
      class: "link-button earlier", role: "treeitem", tabindex: "-1", "aria-level": String(down),
      dataset: { branch: head.id },
    }, "Show earlier entries of this branch"),
    renderRows(opened.filter((row) => row.id !== head.id), head.id, down));
}

/** The depth in the tree of what is drawn in ``element``: one more for each branch (.nest)
 * it is in. */
function levelOf(element) {
  let level = 1;
  for (let node = element.parentElement; node && node !== $("tree"); node = node.parentElement) {
    if (node.classList.contains("nest")) level++;
  }
  return level;
}

/** Draw the branch at ``headId`` again alone (opened, closed or grown), or else the tree. */
function redrawHead(headId) {
  const nest = $("tree").querySelector(`.nest[data-head="${CSS.escape(headId)}"]`);
  const head = [state.outline, ...state.opened.values()].flat().find((row) => row.id === headId && !row.spine)
    || (state.opened.get(headId) || []).find((row) => row.id === headId);
  if (!nest || !head) { renderTree(); return; }
  redraw(() => nest.replaceWith(renderHeadRow(head, levelOf(nest))));
}

function renderRow(row, isHead, level) {
  const leaf = state.view && row.id === state.view.leafId;
  const classes = ["row", row.onBranch ? "on-branch" : "off-branch"];
  if (row.id === state.selected) classes.push("selected");
  // For the mouse alone: the row's aria-expanded says what it says, and Right and Left open
  // and close the branch from its row (a button in a tree item is no part of a tree; each
  // was a tab stop once, 600 of them for a root with 600 branches)
  const toggle = isHead ? h("span", {
    class: "toggle", "aria-hidden": "true", title: state.opened.has(row.id) ? "Close this branch" : "Open this branch",
  }, state.opened.has(row.id) ? "▾" : "▸") : null;
  // a row names its first children only (a row of a root with 20,000 branches was 222 KB):
  // their count says how many
  const count = row.childCount ?? (row.children || []).length;
  const branches = count > 1 ? h("span", { class: "branch-count", text: `${COUNT.format(count)} branches` }) : null;
  return h("div", {
    class: classes.join(" "), role: "treeitem", tabindex: row.id === state.tabStop ? "0" : "-1",
    "aria-label": rowName(row, count, leaf),
    // the entry on show, said as well as drawn (a screen reader heard no row selected)
    "aria-selected": String(row.id === state.selected),
    "aria-expanded": isHead ? String(state.opened.has(row.id)) : null,
    // its depth: a screen reader heard the rows of an opened branch as the chain's, one flat
    // list with nothing to tell where the branch began or ended
    "aria-level": String(level),
    dataset: { id: row.id },
  },
  toggle || h("span", { class: "dot" }),
  h("span", { class: `kind ${row.kind}`, text: kindName(row) }),
  h("span", { class: "text", text: previewText(row), title: row.preview }),
  row.label ? h("span", { class: "chip", text: `#${row.label}` }) : null,
  branches,
  leaf ? h("span", { class: "leaf-mark", title: "The leaf: the next message continues from here", text: "leaf" }) : null,
  h("span", { class: "id", text: row.id, title: "The entry's id" }));
}

/** What a row is called to a screen reader: what it shows, in the order it shows it (what it
 * says, its label, branches, the leaf, its id at the end of the row), then its time. Its name
 * began with the hex id once, which a reader heard first on every row and no one recognises
 * an entry by; then it put the id last while the row showed it first, and a name that does
 * not hold what is shown, in order, fails those who speak to click ("label in name"). */
function rowName(row, count, leaf) {
  const parts = [`${kindName(row)}: ${previewText(row)}`];
  if (row.label) parts.push(`#${row.label}`);
  if (count > 1) parts.push(`${COUNT.format(count)} branches`);
  if (leaf) parts.push("leaf");
  parts.push(row.id);
  const time = entryTime(row.timestamp);
  if (time) parts.push(time);
  return shown(parts.join(", "));
}

/** An entry's time in full; text that is no time (pi keeps it) as written, not "Invalid Date". */
function fullTime(iso) {
  const date = iso ? new Date(iso) : null;
  if (!date) return "";
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** An entry's time, short: the time of day today, with the day before, the year before that. */
function entryTime(iso) {
  const date = iso ? new Date(iso) : null;
  if (!date || Number.isNaN(date.getTime())) return "";
  const now = new Date();
  if (date.toDateString() === now.toDateString()) return TIME_OF_DAY.format(date);
  return (date.getFullYear() === now.getFullYear() ? DAY : DAY_OF_YEAR).format(date);
}

// Each formatter made once, for every row: a time or a number given toLocaleString makes one
// at each call (half a millisecond and more in Chromium), and drawing a tree of 1,000 rows
// took a second and more for them alone, at every live update.
const TIME_OF_DAY = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const DAY = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const DAY_OF_YEAR = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const COUNT = new Intl.NumberFormat();

/** A click in the tree, on what it does (one listener for all: the tree's parts hold only
 * what they show, so a live update keeps those that did not change). */
function treeClick(event) {
  const part = event.target instanceof Element ? event.target.closest(".toggle, .fold, .earlier, .elided-parent, .row") : null;
  if (!part) return;
  if (part.matches(".toggle")) toggleBranch(part.closest(".row").dataset.id).catch(failed);
  else if (part.matches(".fold")) {
    unfoldMore(part.dataset.fold).catch(failed);
  } else if (part.matches(".earlier")) {
    (part.dataset.branch ? loadEarlierOf(part.dataset.branch) : loadEarlier()).catch(changedOrFailed);
  } else if (part.matches(".elided-parent")) {
    if (state.earlierCursor) loadEarlier().catch(changedOrFailed);
  } else selectEntry(part.dataset.id, true).catch(failed);
}

// What the arrows go through: the tree's items, its rows, folds, "Show earlier entries" and
// the lines for entries not read yet (a fold was a tab stop of its own: in a long session,
// 50 and more Tabs to get through the tree).
const TREE_ITEMS = '[role="treeitem"]';

/** The tree by keyboard, as a tree goes (its rows said to be one, role="tree", took arrows
 * for nothing): Up and Down move between the rows, folds and "Show earlier" buttons shown,
 * Page Up and Page Down ten at a time, Home and End to the first and last, Right opens a
 * branch (and goes into it, open) and Left closes it (or goes up a level); Enter or Space
 * reads the entry (or does what a click on the item does: a fold unfolds). */
function treeKeys(event) {
  const row = event.target;
  if (!(row instanceof Element) || !row.matches(TREE_ITEMS)) return;
  const id = row.dataset.id;
  const items = () => [...$("tree").querySelectorAll(TREE_ITEMS)];
  const by = (step) => {
    const all = items();
    return all[Math.max(0, Math.min(all.indexOf(row) + step, all.length - 1))];
  };
  const moves = {
    ArrowDown: () => by(1),
    ArrowUp: () => by(-1),
    // ten items at a time (they scrolled the tree away from the focused row)
    PageDown: () => by(10),
    PageUp: () => by(-10),
    Home: () => items()[0],
    End: () => items().at(-1),
  };
  const opened = row.querySelector(".toggle") !== null && state.opened.has(id);
  if (moves[event.key]) {
    const next = moves[event.key]();
    if (next) next.focus();
  } else if (!row.classList.contains("row")) {
    if (event.key !== "Enter" && event.key !== " ") return;
    row.click(); // what a click on it does (a fold unfolds, "Show earlier" reads them)
  } else if (event.key === "Enter" || event.key === " ") {
    selectEntry(id, true).catch(failed);
  } else if (event.key === "ArrowRight" && opened) {
    const next = by(1); // into the branch open
    if (next !== row) next.focus();
  } else if (event.key === "ArrowLeft" && !opened) {
    // up: to the item it hangs from, the nearest above it a level up (it did nothing)
    const level = Number(row.getAttribute("aria-level"));
    const above = items().slice(0, items().indexOf(row)).reverse();
    const up = above.find((item) => Number(item.getAttribute("aria-level")) === level - 1);
    if (up) up.focus();
  } else if ((event.key === "ArrowRight" || event.key === "ArrowLeft") && row.querySelector(".toggle")) {
    // the branch is drawn anew: the focus goes back to its head
    toggleBranch(id).then(() => {
      const again = $("tree").querySelector(`.row[data-id="${CSS.escape(id)}"]`);
      if (again) again.focus();
    }).catch(failed);
  } else return;
  event.preventDefault();
}

/** Draw the tree as the state has it: only what changed changes on the page (drawn anew,
 * every live update took 200 to 400 ms at 1,000 rows on a loaded machine, and set the focus,
 * the scroll and the selection again). */
function renderTree() {
  const tree = $("tree");
  const scroll = tree.scrollTop;
  const { spine, heads, loose } = arrange(state.outline);
  const drawn = h("div", {}, renderTop(loose));
  if (!state.outline.length) drawn.append(h("div", { class: "empty", text: "This session has no entries yet." }));
  drawn.append(renderSpine(spine, heads, 0, spine.length, 1));
  redraw(() => {
    morphChildren(tree, drawn);
    if (tree.scrollTop !== scroll) tree.scrollTop = scroll;
    keepTabStop();
  });
}

/** What finds a part of the tree (or the list) among those drawn before: its class and the
 * entry it is of (a row by its entry, a branch by its head, a fold by the row above it), or
 * its session. */
function partKey(node) {
  if (!(node instanceof HTMLElement)) return null;
  const data = node.dataset;
  const of = data.id ?? data.head ?? data.anchor ?? data.fold ?? data.elided ?? data.branch ?? data.session ?? "";
  return `${node.nodeName} ${node.className.split(" ")[0]} ${of}`;
}

/** Make ``parent``'s children those of ``next`` (drawn anew), keeping each element that
 * stands for the same part (its attributes and children made the new ones'): what did not
 * change is not touched, and the focused row stays the focused element. */
function morphChildren(parent, next) {
  const drawn = new Map();
  for (const child of parent.children) drawn.set(partKey(child), child);
  let cursor = parent.firstChild;
  for (const node of [...next.childNodes]) {
    const key = partKey(node);
    let match = key === null ? cursor : drawn.get(key);
    if (match && (match.nodeType !== node.nodeType || partKey(match) !== key)) match = null;
    if (!match) {
      parent.insertBefore(node, cursor);
      continue;
    }
    if (key !== null) drawn.delete(key);
    if (key === null) {
      if (match.nodeValue !== node.nodeValue) match.nodeValue = node.nodeValue;
    } else if (!match.isEqualNode(node)) {
      for (const { name } of [...match.attributes]) if (!node.hasAttribute(name)) match.removeAttribute(name);
      for (const { name, value } of node.attributes) if (match.getAttribute(name) !== value) match.setAttribute(name, value);
      morphChildren(match, node);
    }
    if (match === cursor) cursor = cursor.nextSibling;
    else parent.insertBefore(match, cursor);
  }
  while (cursor) {
    const gone = cursor;
    cursor = cursor.nextSibling;
    gone.remove();
  }
}

/** Put ``change`` (a part of the tree drawn anew) on the page, the focus kept where it was:
 * a live update, an opened branch or more rows shown drew the focused row (or button) anew
 * and left the focus on the page's body, so a keyboard reader lost their place (and Tab went
 * back to the page's top) at every append an agent made. */
function redraw(change) {
  const focused = focusedInTree();
  change();
  if (focused !== null && !$("tree").contains(document.activeElement)) {
    // the same row or button drawn anew (a fold all unfolded: its first row), else the row
    // that takes Tab
    const again = [...focused, '.row[tabindex="0"]'].map((selector) => $("tree").querySelector(selector)).find(Boolean);
    if (again) again.focus({ preventScroll: true });
  }
  sizeChanged();
}

/** What has the focus in the tree, as selectors that find it (or what stands in its place)
 * drawn anew, the first found; null when the focus is not in the tree. */
function focusedInTree() {
  const active = document.activeElement;
  if (!(active instanceof Element) || !$("tree").contains(active)) return null;
  if (active.matches(".fold")) {
    const anchor = CSS.escape(active.dataset.fold);
    return [`.fold[data-fold="${anchor}"]`, `.folds[data-anchor="${anchor}"] .row`];
  }
  if (active.matches(".earlier")) {
    return [active.dataset.branch ? `.earlier[data-branch="${CSS.escape(active.dataset.branch)}"]` : ".earlier:not([data-branch])"];
  }
  if (active.matches(".elided-parent")) {
    const parent = CSS.escape(active.parentElement.dataset.elided);
    return [`.elided[data-elided="${parent}"] > .elided-parent`, `.row[data-id="${parent}"]`];
  }
  const row = active.closest(".row"); // a row, or its toggle
  return row ? [`.row[data-id="${CSS.escape(row.dataset.id)}"]`] : [];
}

/** One row of the tree takes Tab, as a tree's does (each row did: a tree of thousands of rows
 * was thousands of tab stops): the last focused, else the selected entry, else the first. */
function keepTabStop() {
  const tree = $("tree");
  if (tree.querySelector('.row[tabindex="0"]')) return;
  const byId = (id) => (id ? tree.querySelector(`.row[data-id="${CSS.escape(id)}"]`) : null);
  const row = byId(state.selected) || tree.querySelector(".row");
  if (row) moveTabStop(row);
}

function moveTabStop(row) {
  for (const other of $("tree").querySelectorAll('.row[tabindex="0"]')) other.tabIndex = -1;
  row.tabIndex = 0;
  state.tabStop = row.dataset.id;
}

/** What stands above the main outline's first spine row: "Show earlier entries" and the
 * heads whose parent is not shown. */
function renderTop(loose) {
  const top = h("div", { class: "outline-top" });
  if (state.earlierCursor) {
    top.append(h("div", { class: "link-button earlier", role: "treeitem", tabindex: "-1", "aria-level": "1" }, "Show earlier entries"));
  }
  top.append(renderLoose(loose, 1));
  return top;
}

/** The outline's ``added`` first spine rows were just read ("Show earlier"): they and their
 * branches go on top of what is drawn, which stays as it is (drawing every row again took
 * 2 to 4 s a click near 20,000 rows); what stands above is drawn again, as some of its heads
 * now have their parent shown. */
function prependRows(added) {
  const tree = $("tree");
  const top = tree.querySelector(":scope > .outline-top");
  if (!top) { renderTree(); return; }
  const scroll = tree.scrollTop;
  const { spine, heads, loose } = arrange(state.outline);
  const rows = renderSpine(spine, heads, 0, added, 1);
  const newTop = renderTop(loose);
  redraw(() => {
    top.replaceWith(newTop);
    newTop.after(rows);
    tree.scrollTop = scroll;
  });
}

/** Open or close the branch at ``headId``, in turn (a live update under way reads the
 * branches open again: opened meanwhile, it was closed again by it). */
function toggleBranch(headId) {
  return inTurn(async () => {
    if (state.opened.has(headId)) {
      state.opened.delete(headId);
      state.openedEarlier.delete(headId);
      redrawHead(headId);
      return;
    }
    await openBranch(headId, true);
  });
}

/** Pages of an outline (``args`` of session_get), newest first, until ``atLeast(first
 * answer)`` rows or its start: the rows in order, the cursor of the earlier ones not read,
 * the first answer. */
async function readOutline(args, atLeast) {
  let rows = [];
  let cursor = null;
  let first = null;
  let wanted = 0;
  do {
    // No more than wanted: whole pages overshot by up to a page, which the next refresh then
    // took for what was shown, so each refresh showed (and read) a page more.
    const page = { ...args, limit: first ? Math.min(OUTLINE_PAGE, wanted - rows.length) : OUTLINE_PAGE };
    if (cursor) page.cursor = cursor;
    const answer = await tool("session_get", page);
    if (!first) {
      first = answer;
      wanted = atLeast(answer);
    }
    rows = [...answer.outline, ...rows];
    cursor = answer.nextCursor;
  } while (cursor && rows.length < wanted);
  return { rows, cursor, answer: first };
}

/** Open the branch at ``headId``: its outline from the head, every page of it up to
 * OPEN_BRANCH_ROWS rows, or as many as it showed before (pages come newest last); past that,
 * its earliest rows on demand. */
async function openBranch(headId, render, shown = 0) {
  const sessionId = state.sessionId;
  let read;
  try {
    read = await readOutline({ session_id: sessionId, view: "outline", entry_id: headId },
      (first) => Math.max(OPEN_BRANCH_ROWS, shown));
  } catch (error) {
    if (sessionId !== state.sessionId) return;
    state.opened.delete(headId); // gone (the session changed): nothing to open
    if (render) failed(error);
    return;
  }
  if (sessionId !== state.sessionId) return; // another session opened meanwhile
  state.opened.set(headId, read.rows);
  if (read.cursor) state.openedEarlier.set(headId, read.cursor); else state.openedEarlier.delete(headId);
  if (render) redrawHead(headId);
}

/** The page of rows of opened branch ``headId`` before those shown, in turn (as loadEarlier). */
function loadEarlierOf(headId) {
  return inTurn(async () => {
    const sessionId = state.sessionId;
    const cursor = state.openedEarlier.get(headId);
    if (!cursor) return;
    const answer = await tool("session_get", {
      session_id: sessionId, view: "outline", entry_id: headId, limit: OUTLINE_PAGE, cursor,
    });
    if (sessionId !== state.sessionId) return; // another session opened meanwhile
    state.opened.set(headId, [...answer.outline, ...(state.opened.get(headId) || [])]);
    if (answer.nextCursor) state.openedEarlier.set(headId, answer.nextCursor); else state.openedEarlier.delete(headId);
    redrawHead(headId);
  });
}

/** Reveal the next UNFOLD_PAGE entries of the fold after row ``anchorId``, in turn (a live
 * update under way reads the fold again as it was: unfolded meanwhile, it was folded back). */
function unfoldMore(anchorId) {
  return inTurn(() => unfold(anchorId, (state.unfolded.get(anchorId) || []).length + UNFOLD_PAGE, true));
}

/** Reveal ``count`` entries of the fold after row ``anchorId``: the path to the parent of the
 * next listed row, newest last (session_get view branch with entry_id). */
async function unfold(anchorId, count, render) {
  const sessionId = state.sessionId;
  const rows = findChain(anchorId);
  const nextRow = rows ? rows[rows.findIndex((row) => row.id === anchorId) + 1] : null;
  const anchor = rows ? rows.find((row) => row.id === anchorId) : null;
  if (!nextRow || !anchor || !anchor.folded) { state.unfolded.delete(anchorId); return; }
  count = Math.min(count, anchor.folded);
  // Revealed from the bottom up, a click reads only the entries above those shown: each read
  // them all again, and past 1,000 the server refused the limit (a fold of more could not be
  // unfolded past it). Read again (a live update), the entries above the next row are read
  // up to the newest of those shown before, if it is among them (an entry never changes):
  // each update read them all again, 336 requests and a minute for 1,000 of 4 KB.
  const kept = render ? state.unfolded.get(anchorId) || [] : [];
  const shown = render ? [] : state.unfolded.get(anchorId) || [];
  const newest = shown.length ? shown[shown.length - 1].id : null;
  const wanted = count - kept.length;
  let entries = [];
  let cursor = null;
  let met = null; // the rows shown before, the newest of them met on the way up
  while (entries.length < wanted) { // pages also stop at about 40 KB: on with the cursor
    // (a live update: a few entries first, as most add one or two)
    const page = newest && !cursor ? Math.min(UPDATE_PAGE, wanted) : Math.min(ENTRIES_PAGE, wanted - entries.length);
    const args = {
      session_id: sessionId, entry_id: kept.length ? kept[0].parentId : nextRow.parentId, limit: page,
    };
    if (cursor) args.cursor = cursor;
    const answer = await tool("session_get", args);
    const at = newest ? answer.entries.findIndex((entry) => entry.id === newest) : -1;
    if (at >= 0) {
      entries = [...answer.entries.slice(at + 1), ...entries];
      // (the leaf moved to another branch since: said by their dots)
      met = shown.map((row) => (row.onBranch === anchor.onBranch ? row : { ...row, onBranch: anchor.onBranch }));
      break;
    }
    entries = [...answer.entries, ...entries];
    cursor = answer.nextCursor;
    if (!cursor) break;
  }
  if (sessionId !== state.sessionId) return; // another session opened meanwhile
  let revealed = entries.map((entry) => rowOf(entry, anchor.onBranch));
  // what is shown ends right above the next listed row
  if (met) revealed = [...met, ...revealed];
  revealed = revealed.slice(-Math.max(wanted, 0));
  state.unfolded.set(anchorId, [...revealed, ...kept]);
  if (!render) return;
  const box = $("tree").querySelector(`.folds[data-anchor="${CSS.escape(anchorId)}"]`);
  if (box) redraw(() => box.replaceWith(renderFold(anchor, levelOf(box))));
  else renderTree();
}

/** The row of entry ``id`` as read (of the outline, an opened branch or a fold), or null. */
function rowShown(id) {
  for (const rows of [state.outline, ...state.opened.values(), ...state.unfolded.values()]) {
    const row = rows.find((candidate) => candidate.id === id);
    if (row) return row;
  }
  return null;
}

/** The spine rows (of the main outline or an opened branch) that hold ``id``. */
function findChain(id) {
  const chains = [state.outline, ...state.opened.values()];
  for (const rows of chains) {
    const spine = rows.filter((row) => row.spine);
    if (spine.some((row) => row.id === id)) return spine;
  }
  return null;
}

// --- one entry ------------------------------------------------------------------------------

function markSelected(entryId) {
  for (const row of document.querySelectorAll(".row")) {
    const selected = row.dataset.id === entryId;
    row.classList.toggle("selected", selected);
    // set only when it changes: set again, every row was a change to a screen reader
    if (row.getAttribute("aria-selected") !== String(selected)) row.setAttribute("aria-selected", String(selected));
  }
}

async function selectEntry(entryId, fromClick) {
  state.selected = entryId;
  // said of another entry, or of this one before the reader found it
  if (fromClick || state.saidFolded !== entryId) $("detail-where").hidden = true;
  markSelected(entryId);
  // Closed now, not when the entry's answer comes: a Label click in between opens it for this entry.
  if (fromClick) $("label-form").hidden = true;
  // the address keeps the reader's place (this step of the history, not a new one)
  if (fromClick && TRANSPORT === "http") history.replaceState(history.state, "", placeAddress(state.sessionId, entryId));
  // a live update meanwhile leaves the entry (megabytes, maybe) to this read, not a second
  state.reading = entryId;
  let entry;
  try {
    const answer = await tool("session_get", { session_id: state.sessionId, entry_id: entryId, limit: 1 });
    if (state.selected !== entryId) return;
    entry = answer.entries[answer.entries.length - 1];
    if (entry.omitted && transport.canReadResources && wholeInResource(entry)) {
      try {
        const read = await transport.readResource(`session://${state.sessionId}/entries/${encodeURIComponent(entryId)}`);
        entry = JSON.parse(read.contents[0].text);
      } catch (_) { /* the stub says where it is */ }
    }
  } finally {
    if (state.reading === entryId) state.reading = null;
  }
  if (state.selected !== entryId) return;
  state.entry = entry;
  renderDetail(entry);
}

/** Read entry ``entryId`` whole, a piece of its JSON text at a time (session_get with
 * offset: no one answer holds it), saying on ``button`` how far it is; then show it. */
async function readInPieces(entryId, button) {
  const sessionId = state.sessionId;
  const pieces = [];
  let offset = 0;
  button.disabled = true;
  try {
    while (offset !== null) {
      const answer = await tool("session_get", { session_id: sessionId, entry_id: entryId, offset });
      if (state.sessionId !== sessionId || state.selected !== entryId) return; // the reader moved on
      const piece = answer.piece;
      pieces.push(piece.text);
      offset = piece.nextOffset ?? null;
      const done = piece.totalChars - piece.left;
      button.textContent = `Reading… ${Math.floor((100 * done) / piece.totalChars)}% of ${COUNT.format(piece.totalChars)} characters`;
    }
  } catch (error) { // said by the caller; the button asks again
    button.disabled = false;
    button.textContent = "Read all of it";
    throw error;
  }
  const entry = JSON.parse(pieces.join(""));
  state.entry = entry;
  renderDetail(entry);
}

function renderDetail(entry, withBody = true) {
  $("detail").hidden = false;
  $("detail").parentElement.classList.remove("solo");
  const leaf = state.view && entry.id === state.view.leafId;
  const role = entry.message ? entry.message.role : null;
  const kindClass = role === "toolResult" ? "toolResult" : role || (entry.type === "compaction" || entry.type === "branch_summary" ? "summary" : "meta");
  const title = [
    h("span", { class: `kind ${kindClass}`, text: role === "toolResult" ? "tool result" : role || entry.type.replace(/_/g, " ") }),
    h("code", { text: entry.id }),
    h("span", { text: fullTime(entry.timestamp) }),
    entry.message && entry.message.model ? h("span", { text: `${entry.message.provider}:${entry.message.model}` }) : null,
    leaf ? h("span", { class: "leaf-mark", text: "leaf" }) : null,
  ];
  $("detail-title").replaceChildren(...title.filter(Boolean));
  // named by its entry, as the entry's row is (the pane was "Entry" whatever it showed: a
  // screen reader going to it heard nothing of which)
  const row = rowShown(entry.id) || rowOf(entry, false);
  $("detail").setAttribute("aria-label", `Entry: ${rowName(row, row.childCount ?? (row.children || []).length, leaf)}`);
  syncActions();
  if (withBody) $("detail-body").replaceChildren(...renderEntry(entry));
}

function block(title, ...children) {
  return h("div", { class: "block" }, title ? h("div", { class: "block-title", text: title }) : null, ...children);
}

function json(value) {
  return h("pre", { class: "json", text: JSON.stringify(value, null, 2) });
}

function renderContent(content) {
  if (typeof content === "string") return [h("div", { class: "text-block", text: content })];
  return (content || []).map((part) => {
    if (part.type === "text") return h("div", { class: "text-block block", text: part.text });
    if (part.type === "thinking") return block("thinking", h("div", { class: "thinking", text: part.thinking }));
    if (part.type === "toolCall") {
      return h("div", { class: "tool-call block" }, h("div", { class: "tool-name", text: `→ ${part.name}` }), json(part.arguments));
    }
    if (part.type === "image" && /^image\/(png|jpeg|gif|webp)$/.test(part.mimeType || "")) {
      return h("img", { alt: "image", src: `data:${part.mimeType};base64,${part.data}` });
    }
    return json(part);
  });
}

// What a stub of an entry too large for a page holds; an entry with more is one with its long
// texts cut (session_get with limit 1), shown as it is under the note that says so.
const STUB_KEYS = new Set(["type", "id", "parentId", "timestamp", "role", "omitted"]);

/** Whether the entry's resource gives it whole: the server names the resource only then
 * (past the 8 MiB one answer holds it refuses it, and the page's read of it was a 400). */
function wholeInResource(entry) {
  return entry.omitted.includes("session://");
}

function renderEntry(entry) {
  if (entry.omitted) {
    const cut = Object.keys(entry).some((key) => !STUB_KEYS.has(key));
    const note = h("p", { class: "note", text: cut ? `Truncated: ${entry.omitted}` : entry.omitted });
    // the rest in pieces, where the resource does not give it (or the host reads none)
    if (!(transport.canReadResources && wholeInResource(entry))) {
      const button = h("button", { type: "button", class: "read-all", text: "Read all of it" });
      button.addEventListener("click", () => readInPieces(entry.id, button).catch(failed));
      note.append(" ", button);
    }
    return cut ? [note, ...renderEntry({ ...entry, omitted: undefined })] : [note];
  }
  const message = entry.message;
  if (entry.type === "message" && message) {
    const parts = [];
    if (message.role === "toolResult") parts.push(block(`result of ${message.toolName}${message.isError ? " (error)" : ""}`));
    parts.push(...renderContent(message.content));
    if (message.role === "assistant" && message.errorMessage) parts.push(block("error", h("div", { class: "text-block", text: message.errorMessage })));
    if (message.usage && message.usage.totalTokens) {
      parts.push(h("p", { class: "note", text: `${message.usage.totalTokens.toLocaleString()} tokens · stop: ${message.stopReason}` }));
    }
    return parts;
  }
  if (entry.type === "compaction") {
    return [block(`compaction · ${Number(entry.tokensBefore || 0).toLocaleString()} tokens before`, h("div", { class: "text-block", text: entry.summary })),
      h("p", { class: "note", text: `kept from ${entry.firstKeptEntryId || "the retained tail"}` })];
  }
  if (entry.type === "branch_summary") return [block(`summary of the branch left at ${entry.fromId}`, h("div", { class: "text-block", text: entry.summary }))];
  return [json(entry)];
}

// --- actions ---------------------------------------------------------------------------------

async function act(button, work) {
  const from = document.activeElement; // where the reader was
  button.disabled = true;
  try {
    await work();
  } catch (error) {
    failed(error);
  } finally {
    button.disabled = false;
    syncActions();
    focusBack(from);
  }
}

/** The focus lost while acting (its button disabled as it worked, the label's form hidden,
 * the session drawn anew), which left a keyboard reader on the page's body: back on
 * ``from``, else on what stands for it (the Label button for its form, the entry's row, the
 * tree's row that takes Tab). Taken elsewhere meanwhile, it stays there. */
function focusBack(from) {
  const active = document.activeElement;
  // Lost: on the body, or still on what was hidden or disabled meanwhile (Chromium moves the
  // focus off a hidden element only at its next rendering, which may come after this).
  const lost = !active || active === document.body || !active.isConnected || active.disabled || !active.checkVisibility();
  if (!(from instanceof HTMLElement) || !lost) return;
  const row = state.selected ? $("tree").querySelector(`.row[data-id="${CSS.escape(state.selected)}"]`) : null;
  const places = [from, $("label-form").contains(from) ? $("act-label") : null, row, $("tree").querySelector('[tabindex="0"]')];
  const place = places.find((element) => element && element.isConnected && !element.disabled && element.checkVisibility());
  if (place) place.focus();
}

/** Moving the leaf to the leaf does nothing: say so by the button. */
function syncActions() {
  $("act-move").disabled = !state.entry || !state.view || state.entry.id === state.view.leafId;
}

function wireActions() {
  $("sessions").addEventListener("keydown", listKeys);
  $("sessions").addEventListener("focusin", (event) => {
    const option = event.target instanceof HTMLElement ? event.target.closest('[role="option"]') : null;
    if (!option) return;
    state.listStop = option.dataset.session || null;
    for (const other of $("sessions").querySelectorAll('[role="option"][tabindex="0"]')) other.tabIndex = -1;
    option.tabIndex = 0;
  });
  $("tree").addEventListener("keydown", treeKeys);
  $("tree").addEventListener("click", treeClick);
  $("tree").addEventListener("focusin", (event) => {
    const row = event.target instanceof Element ? event.target.closest(".row") : null;
    if (row) moveTabStop(row);
  });
  $("act-move").addEventListener("click", () => act($("act-move"), async () => {
    const moved = await tool("session_move_to", { session_id: state.sessionId, entry_id: state.selected });
    toast(`The leaf is now ${moved.leafId}: the next message continues from here.`);
    await refresh();
  }));
  $("act-fork").addEventListener("click", () => act($("act-fork"), async () => {
    const forked = await tool("session_fork", { session_id: state.sessionId, entry_id: state.selected, position: "at" });
    toast(`Forked into a new session ${forked.id.slice(0, 8)}.`);
    if (TRANSPORT === "http") await loadSessions(false);
    await openSession(forked.id, true);
  }));
  $("act-label").addEventListener("click", () => {
    $("label-form").hidden = !$("label-form").hidden;
    const row = rowShown(state.selected);
    $("label-text").value = row && row.label ? row.label : "";
    if (!$("label-form").hidden) $("label-text").focus();
  });
  // Escape closes the form unsaved, the focus back on the button that opened it
  $("label-form").addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.preventDefault();
    $("label-form").hidden = true;
    $("act-label").focus();
  });
  $("label-form").addEventListener("submit", (event) => {
    event.preventDefault();
    act($("label-form").querySelector("button"), async () => {
      const label = $("label-text").value.trim();
      await tool("session_append", { session_id: state.sessionId, entry: { type: "label", target_id: state.selected, label: label || null } });
      $("label-form").hidden = true;
      toast(label ? `Labelled #${label}.` : "Label removed.");
      await refresh();
    });
  });
  $("prompt").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("prompt-text").value.trim();
    if (!text) return;
    act($("prompt-send"), async () => {
      const run = await tool("agent_run", { prompt: text, session_id: state.sessionId, wait: false });
      $("prompt-text").value = "";
      toast("The agent is working…");
      followRun(run.runId);
    });
  });
  $("prompt-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("prompt").requestSubmit();
  });
}

/** Until the run ends, refresh as it goes (the page also hears each append as it happens). */
async function followRun(runId) {
  state.run = runId;
  for (let turn = 0; turn < 600 && state.run === runId; turn++) {
    let status;
    try {
      status = await tool("agent_status", { run_id: runId, wait_seconds: 2 });
    } catch (error) {
      failed(error);
      return;
    }
    if (TRANSPORT === "app") await refresh();
    if (status.status !== "running") {
      if (status.status !== "completed") toast(`The run ended: ${status.error || status.status}`, true);
      await refresh();
      // said (a status a screen reader hears) as the start was: a reader who cannot see the
      // answer come into the tree heard nothing of it
      if (status.status === "completed") toast("The agent is done: its answer is the new leaf.");
      return;
    }
  }
}

// --- live updates (the page) ----------------------------------------------------------------

let stopListening = null;
let refreshTimer = null;

function soon(work) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => work().catch(failed), 120);
}

/** The dot that says whether the page hears changes: its colour, and its words on hover and
 * to a screen reader (the list alone, live, said "not connected"; a screen reader heard
 * nothing of it). */
function showLive(on, why) {
  const said = why || (on ? "live: changes appear as they happen" : "reconnecting…");
  $("live").classList.toggle("on", on);
  $("live").title = said;
  $("live").setAttribute("aria-label", said);
  // The server away, said in words (a grey dot alone said it), with a way to try at once.
  const away = !on && !why;
  const text = away ? `Reconnecting… the server does not answer: is mcp-agent-sessions serve still running on ${location.host}?` : "";
  if ($("connection").textContent !== text) $("connection").textContent = text;
  $("retry").hidden = !away;
}

/** The page's handler of its stream's state: the dot, and, at the first word of it (open, or
 * not to be had), ``first``. */
function listening(first) {
  let waiting = true;
  return (on) => {
    showLive(on);
    if (waiting) {
      waiting = false;
      first();
    }
  };
}

/** Listens for changes to session ``sessionId`` (and the list); ``ready`` once the stream is
 * open or is not to be had, or listening stops first. */
function watchSession(sessionId, ready) {
  if (stopListening) stopListening();
  const uri = `session://${sessionId}`;
  const heard = (message) => {
    if (message.method === "notifications/resources/updated" && message.params.uri === uri) {
      soon(async () => { await refresh(); await loadSessions(false); });
    }
    // a deleted session is said to be updated too: reading it then says it is gone
    else if (message.method === "notifications/resources/list_changed") loadSessions(false);
    else if (message.method === "reconnected") { soon(refresh); loadSessions(false); }
  };
  // the list, read before the stream opened, is read again once it is
  const first = () => { ready(); loadSessions(false); };
  const stop = transport.listen({ resourcesListChanged: true, resourceSubscriptions: [uri] }, heard, listening(first));
  stopListening = () => { ready(); stop(); };
}

// --- the MCP App: sizes, theme and the tool result the host hands over ------------------

let lastHeight = 0;
function sizeChanged() {
  if (TRANSPORT !== "app") return;
  const height = Math.ceil($("app").getBoundingClientRect().height);
  if (height === lastHeight) return;
  lastHeight = height;
  transport.notify("ui/notifications/size-changed", { height });
}

function applyHostContext(context) {
  if (!context) return;
  if (context.theme) document.documentElement.dataset.theme = context.theme;
  // the view says it can go fullscreen: there it fills the frame (viewer.css)
  if (context.displayMode) document.documentElement.dataset.displayMode = context.displayMode;
  const styles = context.styles || {};
  // the host's style variables (its colours, fonts, sizes, radii: viewer.css reads them)
  for (const [name, value] of Object.entries(styles.variables || {})) {
    if (!name.startsWith("--")) continue;
    if (value) document.documentElement.style.setProperty(name, value);
    else document.documentElement.style.removeProperty(name);
  }
  // and its fonts (@font-face rules, which --font-sans and --font-mono name): one sheet of
  // them, replaced when the host sends others
  const fonts = styles.css && styles.css.fonts;
  if (typeof fonts === "string") {
    let sheet = $("host-fonts");
    if (!sheet) {
      sheet = h("style", { id: "host-fonts" });
      document.head.append(sheet);
    }
    if (sheet.textContent !== fonts) sheet.textContent = fonts;
  }
}

function onHostNotification(message) {
  if (message.method === "ui/notifications/tool-input") {
    // session_get names its session before the result comes: start reading it
    const sessionId = (message.params && message.params.arguments || {}).session_id;
    if (typeof sessionId === "string" && !state.sessionId) openSession(sessionId).catch(() => {});
  } else if (message.method === "ui/notifications/tool-result") {
    const result = message.params || {};
    const data = result.structuredContent || {};
    const sessionId = (data.session && data.session.id) || data.sessionId;
    if (sessionId) openSession(sessionId).catch(failed);
    else if (result.isError) toast((result.content || []).map((b) => b.text || "").join(" "), true);
  } else if (message.method === "ui/notifications/host-context-changed") {
    applyHostContext(message.params);
  }
}

// --- start ----------------------------------------------------------------------------------

async function start() {
  wireActions();
  $("detail").parentElement.classList.add("solo");
  if (TRANSPORT === "app") {
    transport = new AppTransport(onHostNotification);
    const init = await transport.connect();
    applyHostContext(init.hostContext);
    new ResizeObserver(sizeChanged).observe($("app"));
    $("tree").replaceChildren(h("div", { class: "empty", text: "Waiting for the tool's result…" }));
    return;
  }
  queryToFragment();
  transport = new HttpTransport();
  transport.onRefused = signedOut;
  let searchTimer = null;
  $("search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      state.query = $("search").value.trim();
      loadSessions(false);
    }, 250);
  });
  $("more-sessions").addEventListener("click", () => loadSessions(true).catch(failed));
  // The server away: tried again now at a word from the reader, or when the page is back in
  // view or the network back (not only at the next try, which may be seconds away).
  $("retry").addEventListener("click", () => transport.retryNow());
  const tryIfLost = () => { if (transport.lost && !document.hidden) transport.retryNow(); };
  window.addEventListener("online", tryIfLost);
  document.addEventListener("visibilitychange", tryIfLost);
  // A link pasted into this tab (another session, or the sign-in link again) is followed.
  window.addEventListener("hashchange", () => {
    // a token given: signed in with it (with none, the kept one was given again at each
    // change of the address, which started the tabs' stream anew at each Back)
    const given = new URLSearchParams(location.hash.slice(1)).has("token");
    const token = given ? takeToken() : null;
    const resumed = token ? signIn(token) : null;
    if (resumed) { resumed.catch(failed); return; }
    // (Back and Forward through the sessions opened come here too)
    const address = new URLSearchParams(location.hash.slice(1));
    const other = address.get("session");
    if (!other && !given && !transport.refused) closeSession();
    const next = other && other !== state.sessionId ? openSession(other, false, address.get("entry")) : loadSessions(false);
    next.catch(failed);
  });
  // Another tab of this page signed in (the origin's storage): this one picks up its token.
  window.addEventListener("storage", (event) => {
    if (event.key === TOKEN_KEY && event.newValue && transport.refused) {
      const resumed = signIn(event.newValue);
      if (resumed) resumed.catch(failed);
    }
  });
  await begin();
}

start().catch(failed);
