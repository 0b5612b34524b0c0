// An agent in a process of its own, for the test that kills it mid-action: the
// example's booking tool (run "run-7") on the AI SDK or OpenAI Agents JS, its journal
// in a SQLite file, driven by the SDK's test model. Prints `{ results, action }`.
//
//   node agent-process.mjs "AI SDK"|"OpenAI Agents JS" JOURNAL.sqlite SERVICE_URL
import Database from "better-sqlite3";
import { createJournal, sqliteAdapter } from "idemkit";
import { bookForAiSdk, bookForOpenAIAgents } from "../../examples/agent-tools/booking-tools.mjs";
import { runAiSdk, runOpenAIAgents } from "./agent-drivers.mjs";

const [sdk, db, url] = process.argv.slice(2);
const journal = createJournal({ adapter: sqliteAdapter(new Database(db), { table: "idemkit_journal" }) });
const settings = { journal, runId: "run-7", url, breaker: false };
const input = { customer: "anna", slot: "2026-12-01T10:00" };
const { results } =
  sdk === "AI SDK"
    ? await runAiSdk({ tools: { book: bookForAiSdk(settings) }, toolName: "book", input, turns: 1 })
    : await runOpenAIAgents({ tools: [bookForOpenAIAgents(settings)], toolName: "book", input, turns: 1 });
console.log(JSON.stringify({ results, action: await journal.get("run-7/book") }));
