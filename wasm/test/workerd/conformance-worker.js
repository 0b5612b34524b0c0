// Runs the shared conformance suite inside workerd: over D1 in the Worker, and over
// a Durable Object's storage inside the object.
import * as idemkit from "idemkit";
import { run } from "../harness.js";
import { conformanceCases } from "../conformance.js";
import { journalCases } from "../journal.js";

let tables = 0;

// A handler slow enough (a timer, which opens a Durable Object's input gate) that
// the 50 racing requests overlap it; it counts its executions in the store itself.
function slowHandler(count) {
  return async (request) => {
    await count();
    const { sku } = await request.json();
    await new Promise((resolve) => setTimeout(resolve, 50));
    return Response.json({ order: "o-1", sku }, { status: 201 });
  };
}

const raceOptions = (adapter) => ({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (pathname === "/conformance/d1") {
      const make = () => idemkit.d1Adapter(env.DB, { table: `records_${tables++}` });
      const cases = [...conformanceCases(idemkit, make), ...journalCases(idemkit, make)];
      return Response.json(await run(cases));
    }
    if (pathname === "/conformance/do" || pathname.startsWith("/race/do")) {
      return env.SUITE.get(env.SUITE.idFromName("suite")).fetch(request);
    }
    if (pathname === "/race/d1") {
      await env.DB.prepare("CREATE TABLE IF NOT EXISTS executions (n INTEGER)").run();
      const idem = idemkit.createIdempotency(raceOptions(idemkit.d1Adapter(env.DB, { table: "race_records" })));
      return idem.handle(request, slowHandler(() => env.DB.prepare("INSERT INTO executions VALUES (1)").run()));
    }
    if (pathname === "/race/d1/executions") {
      return Response.json(await env.DB.prepare("SELECT COUNT(*) AS n FROM executions").first());
    }
    return new Response("not found", { status: 404 });
  },
};

export class Suite {
  constructor(ctx) {
    this.storage = ctx.storage;
    this.prefixes = 0;
  }

  async fetch(request) {
    const { pathname } = new URL(request.url);
    if (pathname === "/race/do") {
      this.idem ??= idemkit.createIdempotency(raceOptions(idemkit.durableObjectAdapter(this.storage, { prefix: "race:" })));
      return this.idem.handle(request, slowHandler(async () => this.storage.put("executions", ((await this.storage.get("executions")) ?? 0) + 1)));
    }
    if (pathname === "/race/do/executions") {
      return Response.json({ n: (await this.storage.get("executions")) ?? 0 });
    }
    const make = () => idemkit.durableObjectAdapter(this.storage, { prefix: `case${this.prefixes++}:` });
    const cases = [...conformanceCases(idemkit, make), ...journalCases(idemkit, make)];
    return Response.json(await run(cases));
  }
}
