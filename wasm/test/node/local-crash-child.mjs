// A worker of local-transactions.test.mjs that crashes (SIGKILL, nothing flushed or
// cleaned up) in the middle of its local effect on a SQLite file:
//   completeWith    inside completeWith's transaction, after the order row was inserted
//   beforeComplete  after the order row was committed on its own, before `complete`
import Database from "better-sqlite3";
import * as idemkit from "idemkit";

const [dbPath, mode] = process.argv.slice(2);
const db = new Database(dbPath);
const idem = idemkit.createIdempotency({ adapter: idemkit.sqliteAdapter(db), operation: "orders.create", effect: "local", tenant: () => "acme" });
const held = await idem.claim({ tenant: "acme", key: "crash-1", body: "{}" });
const insertOrder = (conn) => conn.prepare("INSERT INTO orders (id) VALUES (?)").run(`ord_${held.attempt}`);
const crash = () => process.kill(process.pid, "SIGKILL");

if (mode === "completeWith") {
  await idem.completeWith(held, { status: 201, body: "created" }, (conn) => {
    insertOrder(conn);
    crash();
  });
} else if (mode === "beforeComplete") {
  insertOrder(db);
  crash();
  await idem.complete(held, { status: 201, body: "created" });
}
throw new Error(`still running after the crash (mode ${mode})`);
