// pi's token estimates and compaction preparation as an oracle, in detail.
//   node estimates.mjs PEERS_DIR FILE.jsonl KEEP_RECENT_TOKENS[,KEEP...] LEAF_ID...
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. Prints, for each budget kept,
// one result per leaf: {estimates: [estimateTokens of each message of the branch's context], contextTokens,
//  prepared: null (pi refuses) or {firstKeptEntryId, summarized: [roles], turnPrefix: [roles],
//  isSplitTurn, tokensBefore, previousSummary, readFiles, modifiedFiles}}.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, file, keepText, ...leaves] = process.argv.slice(2);
const root = join(peers, "node_modules", "@mariozechner", "pi-coding-agent");
const load = (path) => import(pathToFileURL(join(root, path)).href);
const pi = await load("dist/index.js");
const c = await load("dist/core/compaction/index.js");
const manager = new pi.SessionManager("/", "", file, false);
const perLeaf = (keep) => (leaf) => {
  const settings = { ...c.DEFAULT_COMPACTION_SETTINGS, keepRecentTokens: keep };
  const branch = manager.getBranch(leaf);
  const messages = pi.buildSessionContext(branch).messages;
  const prepared = c.prepareCompaction(branch, settings);
  const result = {
    estimates: messages.map((m) => c.estimateTokens(m)),
    contextTokens: c.estimateContextTokens(messages).tokens,
    prepared: null,
  };
  if (prepared) {
    const { readFiles, modifiedFiles } = c.computeFileLists(prepared.fileOps);
    result.prepared = {
      firstKeptEntryId: prepared.firstKeptEntryId,
      summarized: prepared.messagesToSummarize.map((m) => m.role),
      turnPrefix: prepared.turnPrefixMessages.map((m) => m.role),
      isSplitTurn: prepared.isSplitTurn,
      tokensBefore: prepared.tokensBefore,
      previousSummary: prepared.previousSummary ?? null,
      readFiles,
      modifiedFiles,
    };
  }
  return result;
};
const results = keepText.split(",").map((keep) => leaves.map(perLeaf(Number(keep))));
process.stdout.write(JSON.stringify(results));
