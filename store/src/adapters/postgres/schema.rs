//! The versioned schema: migrations, the statements built on it, and the
//! `--print` script for teams that run their own migrations.
//!
//! | column | type | holds |
//! |---|---|---|
//! | `tenant`, `operation`, `key` | text | the primary key: a record's scope and idempotency key |
//! | `fingerprint` | bytea (32) | what the key first meant (the decision reads it from `record`) |
//! | `state` | text | `running`, `completed`, `unknown` or `released` |
//! | `lease_expires_at` | bigint ms | Running only: the unresolved list's index |
//! | `gc_due_at` | bigint ms | Completed/Released only: GC's index |
//! | `record` | bytea | `Record::encode()`, the source of truth for every decision |
//! | `version` | bigint | bumped by every write; each `UPDATE`/`DELETE` checks it |
//! | `watched` | boolean | a process waits for this record to leave Running (schema version 3) |
//!
//! The derived columns are written by the same statement as `record`, so they can
//! never disagree with it.
//!
//! Every statement names the tables' schema (`public` unless one is
//! configured): a connection's `search_path`, which a role, a database or a
//! pooler may set, never decides which tables a store reads and writes.
//!
//! Every write that leaves a record not Running (an `UPDATE` to a state other
//! than `running`, every `DELETE`) of a row some process waits on (`watched`)
//! also calls `pg_notify` on the store's channel ([`channel_name`]) in the same
//! statement, through a `WITH` over the write's `RETURNING`: no extra round
//! trip, nothing announced when the write was refused (0 rows), and, inside a
//! caller's transaction, nothing delivered before it commits. Writes that keep
//! a record Running announce nothing.
//!
//! Only watched rows are announced because PostgreSQL commits notifying
//! transactions one at a time (they share one lock on the notification queue,
//! held across the commit's WAL flush): a `pg_notify` in every completion
//! made completions commit one at a time however many clients there were. A
//! waiter sets `watched` ([`Sql::watch`]) after it registers in its process and
//! before it reads the record again. Both writes lock the row, so either the
//! mark commits first and the completion sees it (and announces), or the
//! completion commits first and the waiter's read sees the record settled: no
//! wake-up is lost. The mark stays (a later announcing write of the row
//! notifies again, which wakes nobody who does not wait) and is outside the
//! record and its version, so no conditional write is disturbed.
//!
//! `idemkit_token_floor` (schema version 2) holds one number: the highest fencing
//! token or row version of any record GC deleted. A new row's first token and
//! version are above it (the `INSERT` checks that in the same statement), so
//! neither ever repeats for a key, even after its record was deleted.

use super::error::PgError;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 3;

/// The migrations, in order: `MIGRATIONS[n - 1]` brings version `n - 1` to `n`.
/// `{records}` and `{floor}` are the (qualified) table names.
const MIGRATIONS: [&str; 3] = [
    r"
CREATE TABLE {records} (
    tenant           text   NOT NULL,
    operation        text   NOT NULL,
    key              text   NOT NULL,
    fingerprint      bytea  NOT NULL CHECK (octet_length(fingerprint) = 32),
    state            text   NOT NULL CHECK (state IN ('running', 'completed', 'unknown', 'released')),
    lease_expires_at bigint CHECK ((state = 'running') = (lease_expires_at IS NOT NULL)),
    gc_due_at        bigint,
    record           bytea  NOT NULL,
    version          bigint NOT NULL,
    PRIMARY KEY (tenant, operation, key)
);
CREATE INDEX idemkit_records_gc_due ON {records} (gc_due_at) WHERE gc_due_at IS NOT NULL;
CREATE INDEX idemkit_records_lease_expiry ON {records} (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX idemkit_records_unknown ON {records} (tenant, operation, key) WHERE state = 'unknown';
",
    r"
CREATE TABLE {floor} (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),
    value bigint  NOT NULL CHECK (value >= 0)
);
INSERT INTO {floor} (value) SELECT coalesce(max(version), 0) FROM {records};
",
    // A constant default: PostgreSQL adds the column without rewriting the table.
    r"
ALTER TABLE {records} ADD COLUMN watched boolean NOT NULL DEFAULT false;
",
];

/// The schema of the tables when none is configured.
const DEFAULT_SCHEMA: &str = "public";

/// Table names and statements for one PostgreSQL schema.
#[derive(Debug)]
pub(crate) struct Sql {
    /// The schema configured (`None`: [`DEFAULT_SCHEMA`], which is never
    /// created: PostgreSQL makes it with every database).
    pub(crate) schema: Option<String>,
    pub(crate) records: String,
    pub(crate) versions: String,
    pub(crate) floor: String,
    /// The insert of a new record: `$9` is a claim's first token and row
    /// version, refused (no row returned) unless above the token floor; NULL (an
    /// import) makes the row version the floor + 1.
    pub(crate) insert: String,
    pub(crate) raise_floor: String,
    /// `select` plus `now` by the store's clock and the token floor, one row even
    /// when the record is absent: `$4` the caller's time (or NULL), `$5` the
    /// clock's offset.
    pub(crate) select_at: String,
    pub(crate) select_now: String,
    /// The `UPDATE` of a record that stays Running: announces nothing.
    pub(crate) update: String,
    /// The same `UPDATE` of a record that leaves Running, announcing it on
    /// [`channel`](Self::channel) with `$10` (the id bytes in hex) as the payload.
    pub(crate) update_announced: String,
    /// The `DELETE`, announced like [`update_announced`](Self::update_announced)
    /// with `$5` as the payload.
    pub(crate) delete: String,
    /// Marks a record as waited on (`watched`), so the write that ends its
    /// Running state announces it; a row already marked is left as it is.
    pub(crate) watch: String,
    /// The channel the writes of this schema's records are announced on.
    pub(crate) channel: String,
}

/// The `LISTEN`/`NOTIFY` channel of the records in `schema` (`None`:
/// `public`): `idemkit_<schema>`, or when that is longer than an identifier
/// may be (63 bytes), the schema's first 38 characters and 16 hex digits of its
/// hash. Two stores in one database announce on different channels exactly
/// when their schemas differ.
pub(crate) fn channel_name(schema: Option<&str>) -> String {
    let schema = schema.unwrap_or(DEFAULT_SCHEMA);
    let plain = format!("idemkit_{schema}");
    if plain.len() <= 63 {
        return plain;
    }
    let hash = blake3::hash(schema.as_bytes());
    let digits = idemkit_core::hex::lower(hash.as_bytes().get(..8).unwrap_or_default());
    // A valid schema name is ASCII, so any prefix of it is a whole string.
    format!("idemkit_{}_{digits}", schema.get(..38).unwrap_or(schema))
}

/// Whether `name` is a plain lowercase identifier (so it never needs quoting rules
/// beyond double quotes, and cannot inject SQL).
fn valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

impl Sql {
    pub(crate) fn new(schema: Option<&str>) -> Result<Sql, PgError> {
        if let Some(s) = schema
            && !valid_identifier(s)
        {
            return Err(PgError::Config {
                detail: format!(
                    "schema name {s:?} must be 1-63 characters of a-z, 0-9 and _, not starting with a digit"
                ),
            });
        }
        let qualify = |table: &str| format!("\"{}\".{table}", schema.unwrap_or(DEFAULT_SCHEMA));
        let records = qualify("idemkit_records");
        let versions = qualify("idemkit_schema_version");
        let floor = qualify("idemkit_token_floor");
        let cols = "fingerprint, state, lease_expires_at, gc_due_at, record";
        let channel = channel_name(schema);
        let update = format!(
            "UPDATE {records} SET fingerprint = $4, state = $5, lease_expires_at = $6, \
             gc_due_at = $7, record = $8, version = version + 1 \
             WHERE tenant = $1 AND operation = $2 AND key = $3 AND version = $9"
        );
        Ok(Sql {
            schema: schema.map(str::to_owned),
            // $9 is the record's last token: refused unless above the floor;
            // the version starts above the floor, so above every version a
            // deleted row of the key had.
            insert: format!(
                "INSERT INTO {records} (tenant, operation, key, {cols}, version) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, value + 1 \
                 FROM {floor} WHERE $9::bigint > value \
                 ON CONFLICT DO NOTHING RETURNING version"
            ),
            raise_floor: format!("UPDATE {floor} SET value = greatest(value, $1)"),
            select_at: format!(
                "SELECT c.now, r.record, r.version, c.floor \
                 FROM (SELECT {now} AS now, (SELECT value FROM {floor}) AS floor) AS c \
                 LEFT JOIN {records} AS r \
                 ON r.tenant = $1 AND r.operation = $2 AND r.key = $3",
                now = super::clock::now_sql(4, 5)
            ),
            select_now: format!("SELECT {}", super::clock::now_sql(1, 2)),
            // The channel is a valid identifier's characters (a-z, 0-9, _),
            // so it stands as a literal.
            // One row when written (the caller counts it), whether announced
            // or not: CASE calls the volatile pg_notify only for a watched row.
            update_announced: format!(
                "WITH written AS ({update} RETURNING watched) \
                 SELECT CASE WHEN watched THEN pg_notify('{channel}', $10::text) END \
                 FROM written"
            ),
            update,
            delete: format!(
                "WITH deleted AS (DELETE FROM {records} \
                 WHERE tenant = $1 AND operation = $2 AND key = $3 AND version = $4 \
                 RETURNING watched) \
                 SELECT CASE WHEN watched THEN pg_notify('{channel}', $5::text) END \
                 FROM deleted"
            ),
            watch: format!(
                "UPDATE {records} SET watched = true \
                 WHERE tenant = $1 AND operation = $2 AND key = $3 AND NOT watched"
            ),
            channel,
            records,
            versions,
            floor,
        })
    }

    fn versions_ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    version    integer     PRIMARY KEY,\n    applied_at timestamptz NOT NULL DEFAULT now()\n);\n",
            self.versions
        )
    }

    fn migration(&self, to: u32) -> Option<String> {
        let index = usize::try_from(to).ok()?.checked_sub(1)?;
        MIGRATIONS.get(index).map(|m| {
            m.replace("{records}", &self.records)
                .replace("{floor}", &self.floor)
        })
    }

    /// The whole script from an empty database to [`SCHEMA_VERSION`], in one
    /// transaction: what `idemkit migrate --postgres URL --print` shows.
    pub(crate) fn script(&self) -> String {
        let mut out = String::from("BEGIN;\n");
        if let Some(s) = &self.schema {
            out.push_str(&format!("CREATE SCHEMA IF NOT EXISTS \"{s}\";\n"));
        }
        out.push_str(&self.versions_ddl());
        for v in 1..=SCHEMA_VERSION {
            out.push_str(&format!("-- version {v}"));
            out.push_str(&self.migration(v).unwrap_or_default());
            out.push_str(&format!(
                "INSERT INTO {} (version) VALUES ({v});\n",
                self.versions
            ));
        }
        out.push_str("COMMIT;\n");
        out
    }

    /// The advisory lock that serializes concurrent migrations of this schema
    /// (several instances starting at once).
    fn lock_id(&self) -> i64 {
        let hash = blake3::hash(
            format!("idemkit migrate {}", self.schema.as_deref().unwrap_or("")).as_bytes(),
        );
        let mut bytes = [0_u8; 8];
        bytes.copy_from_slice(hash.as_bytes().get(..8).unwrap_or(&[0; 8]));
        i64::from_le_bytes(bytes)
    }

    /// Brings the schema to [`SCHEMA_VERSION`] (one transaction, under an advisory
    /// lock) and returns the version found before. Fails on a newer schema.
    pub(crate) fn migrate(&self, conn: &mut postgres::Client) -> Result<u32, PgError> {
        let fail = |e: postgres::Error| super::error::fail(&e);
        let mut tx = conn.transaction().map_err(fail)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&self.lock_id()])
            .map_err(fail)?;
        match &self.schema {
            Some(s) => tx
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{s}\""))
                .map_err(fail)?,
            None => refuse_tables_elsewhere(&mut tx)?,
        }
        tx.batch_execute(&self.versions_ddl()).map_err(fail)?;
        let found = current_version(&mut tx, &self.versions)?;
        if found > SCHEMA_VERSION {
            return Err(PgError::Schema {
                found,
                expected: SCHEMA_VERSION,
                detail: "the database was migrated by a newer idemkit; upgrade this one".into(),
            });
        }
        for v in found + 1..=SCHEMA_VERSION {
            let sql = self.migration(v).ok_or_else(|| PgError::Schema {
                found,
                expected: SCHEMA_VERSION,
                detail: format!("no migration to version {v} in this build"),
            })?;
            tx.batch_execute(&sql).map_err(fail)?;
            let v_i32 = i32::try_from(v).unwrap_or(i32::MAX);
            tx.execute(
                &format!("INSERT INTO {} (version) VALUES ($1)", self.versions),
                &[&v_i32],
            )
            .map_err(fail)?;
        }
        tx.commit().map_err(fail)?;
        Ok(found)
    }

    /// Checks, without changing anything, that the schema is at [`SCHEMA_VERSION`].
    pub(crate) fn check(&self, conn: &mut postgres::Client) -> Result<(), PgError> {
        let fail = |e: postgres::Error| super::error::fail(&e);
        if self.schema.is_none() {
            refuse_tables_elsewhere(conn)?;
        }
        let exists: bool = conn
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&self.versions.replace('"', "")],
            )
            .and_then(|row| row.try_get(0))
            .map_err(fail)?;
        let found = if exists {
            let mut tx = conn.transaction().map_err(fail)?;
            let v = current_version(&mut tx, &self.versions)?;
            tx.commit().map_err(fail)?;
            v
        } else {
            0
        };
        if found == SCHEMA_VERSION {
            Ok(())
        } else {
            Err(PgError::Schema {
                found,
                expected: SCHEMA_VERSION,
                detail: if found < SCHEMA_VERSION {
                    "run `idemkit migrate --postgres URL` (or apply its --print script) first"
                        .into()
                } else {
                    "the database was migrated by a newer idemkit; upgrade this one".into()
                },
            })
        }
    }
}

/// With no schema configured the tables are `public`'s. Tables found through the
/// connection's `search_path` in another schema were made there by a build that
/// left the schema to it: using `public` instead would leave their records
/// behind (and a key claimed there could run again here), so that is refused,
/// naming the schema to configure.
fn refuse_tables_elsewhere(conn: &mut impl postgres::GenericClient) -> Result<(), PgError> {
    let elsewhere: Option<String> = conn
        .query_opt(
            "SELECT n.nspname::text FROM pg_catalog.pg_class AS c \
             JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace \
             WHERE c.relname = 'idemkit_records' AND n.nspname <> $1 \
             AND pg_catalog.pg_table_is_visible(c.oid)",
            &[&DEFAULT_SCHEMA],
        )
        .and_then(|row| row.map(|r| r.try_get(0)).transpose())
        .map_err(|e| super::error::fail(&e))?;
    match elsewhere {
        None => Ok(()),
        Some(schema) => Err(PgError::Config {
            detail: format!(
                "idemkit's tables were found in schema {schema:?} through the connection's \
                 search_path, and no schema is configured (which means {DEFAULT_SCHEMA:?}): \
                 configure schema {schema:?} (--pg-schema, PgOptions::schema, [store] schema) \
                 so that every instance uses those records"
            ),
        }),
    }
}

fn current_version(tx: &mut postgres::Transaction<'_>, versions: &str) -> Result<u32, PgError> {
    let v: i32 = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {versions}"),
            &[],
        )
        .and_then(|row| row.try_get(0))
        .map_err(|e| super::error::fail(&e))?;
    Ok(u32::try_from(v).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_cannot_inject_sql() {
        assert!(Sql::new(Some("tenant_a1")).is_ok());
        for bad in [
            "",
            "1abc",
            "a\"; DROP TABLE x; --",
            "Upper",
            &"a".repeat(64),
        ] {
            assert!(Sql::new(Some(bad)).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn without_a_schema_every_statement_names_public() {
        let sql = Sql::new(None).unwrap();
        for statement in [
            &sql.insert,
            &sql.raise_floor,
            &sql.select_at,
            &sql.update,
            &sql.update_announced,
            &sql.delete,
            &sql.watch,
        ] {
            assert!(statement.contains("\"public\".idemkit_"), "{statement}");
            assert!(!statement.contains(" idemkit_"), "{statement}");
        }
        let script = sql.script();
        assert!(
            script.contains("CREATE TABLE \"public\".idemkit_records"),
            "{script}"
        );
        assert!(
            !script.contains("CREATE SCHEMA"),
            "public is never created: {script}"
        );
    }

    #[test]
    fn channels_are_identifiers_one_per_schema() {
        assert_eq!(channel_name(None), "idemkit_public");
        assert_eq!(channel_name(Some("tenant_a1")), "idemkit_tenant_a1");
        let long = "a".repeat(63);
        let mut other = "a".repeat(62);
        other.push('b');
        let (c1, c2) = (channel_name(Some(&long)), channel_name(Some(&other)));
        assert_eq!(c1.len(), 63, "{c1}");
        assert_eq!(c2.len(), 63, "{c2}");
        assert_ne!(c1, c2, "schemas that share a prefix get different channels");
        assert!(channel_name(Some(&"a".repeat(55))).len() <= 63);
        for schema in [None, Some("x"), Some(long.as_str())] {
            let sql = Sql::new(schema).unwrap();
            assert!(valid_identifier(&sql.channel), "{}", sql.channel);
            for announcing in [&sql.update_announced, &sql.delete] {
                assert!(
                    announcing.contains(&format!(
                        "CASE WHEN watched THEN pg_notify('{}', ",
                        sql.channel
                    )),
                    "only a watched row is announced: {announcing}"
                );
            }
            assert!(!sql.update.contains("pg_notify"), "{}", sql.update);
        }
    }

    #[test]
    fn the_script_creates_every_index_and_records_its_version() {
        let script = Sql::new(Some("idem")).unwrap().script();
        for needle in [
            "CREATE SCHEMA IF NOT EXISTS \"idem\"",
            "CREATE TABLE \"idem\".idemkit_records",
            "idemkit_records_gc_due",
            "idemkit_records_lease_expiry",
            "idemkit_records_unknown",
            "INSERT INTO \"idem\".idemkit_schema_version (version) VALUES (1);",
            "CREATE TABLE \"idem\".idemkit_token_floor",
            "INSERT INTO \"idem\".idemkit_schema_version (version) VALUES (2);",
        ] {
            assert!(script.contains(needle), "missing {needle}:\n{script}");
        }
    }
}
