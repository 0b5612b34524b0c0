// Runs the shared conformance suite inside workerd: over D1 in the Worker, and over
// a Durable Object's storage inside the object.
import * as idemkit from "idemkit";
import { run } from "../harness.js";
import { conformanceCases } from "../conformance.js";

let tables = 0;

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (pathname === "/conformance/d1") {
      const cases = conformanceCases(idemkit, () => idemkit.d1Adapter(env.DB, { table: `records_${tables++}` }));
      return Response.json(await run(cases));
    }
    if (pathname === "/conformance/do") {
      return env.SUITE.get(env.SUITE.idFromName("suite")).fetch(request);
    }
    return new Response("not found", { status: 404 });
  },
};

export class Suite {
  constructor(ctx) {
    this.storage = ctx.storage;
    this.prefixes = 0;
  }

  async fetch() {
    const cases = conformanceCases(idemkit, () => idemkit.durableObjectAdapter(this.storage, { prefix: `case${this.prefixes++}:` }));
    return Response.json(await run(cases));
  }
}
