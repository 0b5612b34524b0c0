// An agent process for agent-journal.test.mjs: one callWithRetry with a journal in
// a SQLite file, its report printed as JSON on stdout. The test kills it with
// SIGKILL mid-attempt and runs it again with the same action id.
//
//   node agent-call.mjs '{"journal": PATH, "actionId": ..., "url": ..., "tenant": ..., "body": {...}, "timeoutMs": N}'
import Database from "better-sqlite3";
import { callWithRetry, createJournal, sqliteAdapter } from "idemkit";

const args = JSON.parse(process.argv[2]);
const db = new Database(args.journal, { timeout: 10_000 });
const journal = createJournal({ adapter: sqliteAdapter(db, { table: "idemkit_journal" }) });
const report = await callWithRetry({
  journal,
  actionId: args.actionId,
  url: args.url,
  headers: { authorization: `Bearer ${args.tenant}` },
  body: args.body,
  timeoutMs: args.timeoutMs,
  maxAttempts: 8,
  baseDelayMs: 100,
  maxDelayMs: 1000,
});
db.close();
process.stdout.write(JSON.stringify(report) + "\n");
