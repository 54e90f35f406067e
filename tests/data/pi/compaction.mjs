// pi's prepareCompaction as an oracle: what a /compact of one file's branch at each leaf would
// summarise and keep, or null where pi refuses ("Nothing to compact", "Already compacted").
//   node compaction.mjs PEERS_DIR FILE.jsonl KEEP_RECENT_TOKENS LEAF_ID...
// PEERS_DIR holds node_modules/@mariozechner/pi-coding-agent. Prints one result per leaf:
// null or {firstKeptEntryId, summarized, turnPrefix, isSplitTurn}, the counts of messages.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, file, keepText, ...leaves] = process.argv.slice(2);
const root = join(peers, "node_modules", "@mariozechner", "pi-coding-agent");
const load = (path) => import(pathToFileURL(join(root, path)).href);
const pi = await load("dist/index.js");
const { prepareCompaction } = await load("dist/core/compaction/compaction.js");
const manager = new pi.SessionManager("/", "", file, false);
const settings = { ...pi.DEFAULT_COMPACTION_SETTINGS, keepRecentTokens: Number(keepText) };
const results = leaves.map((leaf) => {
  const prepared = prepareCompaction(manager.getBranch(leaf), settings);
  if (!prepared) return null;
  return {
    firstKeptEntryId: prepared.firstKeptEntryId,
    summarized: prepared.messagesToSummarize.length,
    turnPrefix: prepared.turnPrefixMessages.length,
    isSplitTurn: prepared.isSplitTurn,
  };
});
process.stdout.write(JSON.stringify(results));
