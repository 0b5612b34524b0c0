// The table name the SQL adapters (SQLite, D1) put into their statements: it
// cannot be a bound parameter, so only a plain identifier is taken.

import { typeName } from "../errors.js";

const TABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Throws a TypeError naming `table` unless it is a plain SQL identifier. */
export function checkTableName(table) {
  if (typeof table !== "string") throw new TypeError(`the table name must be a string, not ${typeName(table)}`);
  if (!TABLE.test(table)) throw new TypeError(`invalid table name ${JSON.stringify(table)}`);
}
