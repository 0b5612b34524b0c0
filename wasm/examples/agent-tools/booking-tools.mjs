// A booking tool for an agent, on the Vercel AI SDK and on OpenAI Agents JS, that
// books at most once per action however often the SDK or the model runs it again.
//
// The action is "the booking of run <runId>": its id comes from the application's
// run, never from the model (whose tool-call id changes on every turn). The journal
// stores the action's idempotency key before the first attempt, so a retry, a
// re-planned step or a restarted process sends the same key, and the booking
// service answers it from its record instead of booking again. An outcome nobody
// knows reaches the model as `{ state: "unknown", … }`: it must not book again.
//
//   npm install idemkit ai @openai/agents zod
//
// `journal`: createJournal over any adapter, e.g. sqliteAdapter(db, { table: "idemkit_journal" })
// in Node, d1Adapter(env.DB, { table: "idemkit_journal" }) in a Worker.
import { tool as aiSdkTool } from "ai";
import { tool as agentsTool } from "@openai/agents";
import * as z from "zod";
import { aiSdkExecute, openaiAgentsExecute } from "idemkit";

const booking = z.object({ customer: z.string(), slot: z.string() });

/** How the booking is sent: a POST of the tool's input to the service, with the action's key. */
const bookingRequest = (url) => (input) => ({ url, body: { customer: input.customer, slot: input.slot } });

/**
 * The `book` tool for the AI SDK (`generateText({ tools: { book } })`).
 * `settings`: retry and transport settings of callWithRetry (`timeoutMs`, `maxAttempts`,
 * `breaker`, `fetch`).
 */
export function bookForAiSdk({ journal, runId, url, ...settings }) {
  return aiSdkTool({
    description: "Book an appointment slot for a customer",
    inputSchema: booking,
    execute: aiSdkExecute({
      journal,
      // One booking per run: a second call in this run with other arguments is refused.
      actionId: () => `${runId}/book`,
      http: bookingRequest(url),
      ...settings,
    }),
  });
}

/** The same tool for OpenAI Agents JS (`new Agent({ tools: [book] })`). */
export function bookForOpenAIAgents({ journal, runId, url, ...settings }) {
  return agentsTool({
    name: "book",
    description: "Book an appointment slot for a customer",
    parameters: booking,
    execute: openaiAgentsExecute({
      journal,
      actionId: () => `${runId}/book`,
      http: bookingRequest(url),
      ...settings,
    }),
  });
}
