//! `idemkit-loadgen --backend postgres --pgbench-script FILE`: the adapter's own
//! claim and completion as a pgbench script, so that pgbench (C, libpq, two
//! threads) runs exactly the statements `idemkit-loadgen` makes the adapter
//! send, on the same schema. Beside the loadgen's figure this tells what the
//! statements cost the server from what idemkit's client side costs
//! (`benches/postgres/run.sh`).

use std::path::Path;

use idemkit::adapters::Adapter as _;
use idemkit::adapters::memory::MemoryAdapter;
use idemkit::adapters::postgres::{
    PgOptions, PostgresAdapter, StatementWithLiterals, new_key_statements,
};
use idemkit::core::record::{Record, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{IdempotencyKey, RecordId};

use crate::loadgen::{LoadError, LoadgenOp, err};

/// The key column each transaction writes: unique per client and transaction,
/// the shape of the loadgen's own keys (`c{client}-{n}`).
const KEY_EXPRESSION: &str = "('c' || :client_id || '-' || :r)";

/// Drops `schema` if it is there, migrates it afresh (the adapter's tables,
/// empty), and writes the pgbench script of a new key's claim + complete on it
/// to `file`.
///
/// # Errors
///
/// The server could not be reached, the schema not made, or the file not written.
pub fn write_script(url: &str, schema: &str, file: &Path) -> Result<(), LoadError> {
    let options = |schema: &str| PgOptions {
        schema: Some(schema.to_owned()),
        pool_size: 1,
        ..PgOptions::default()
    };
    let pg = PostgresAdapter::connect_with(url, options(schema))
        .map_err(|e| err("postgres connect", e))?;
    pg.connection()
        .map_err(|e| err("postgres", e))?
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .map_err(|e| err("postgres drop schema", e))?;
    drop(pg);
    PostgresAdapter::connect_with(url, options(schema)).map_err(|e| err("postgres migrate", e))?;

    let (id, running, completed) = records_of_one_operation()?;
    let [claim, completion] = new_key_statements(Some(schema), &id, &running, &completed)
        .map_err(|e| err("statements", e))?;
    std::fs::write(file, script(&claim, &completion)).map_err(|e| err("--pgbench-script", e))
}

/// The Running and Completed records of the loadgen's operation on one key, as
/// the engine writes them (on the memory adapter: the bytes do not depend on
/// the store).
fn records_of_one_operation() -> Result<(RecordId, Record, Record), LoadError> {
    let op = LoadgenOp::new()?;
    let store = Store::from(MemoryAdapter::default());
    let key = IdempotencyKey::new("c0-0").map_err(|e| err("key", e))?;
    let id = op.scope.record_id(&key);
    let read = |store: &Store| -> Result<Record, LoadError> {
        let memory = store
            .adapter_as::<MemoryAdapter>()
            .ok_or_else(|| LoadError("the memory adapter".into()))?;
        Ok(memory
            .get(&id)
            .map_err(|e| err("read", e))?
            .stored
            .ok_or_else(|| LoadError("the claim wrote no record".into()))?
            .record)
    };
    let Claim::Execute(guard) = store
        .claim(&op.scope, &key, op.fingerprint, "client-0", &op.policy)
        .map_err(|e| err("claim", e))?
    else {
        return Err(LoadError("a fresh key did not execute".into()));
    };
    let running = read(&store)?;
    guard
        .complete(StoredResponse::new(201, op.response.to_vec()))
        .map_err(|e| err("complete", e))?;
    Ok((id.clone(), running, read(&store)?))
}

/// The script: a random key per transaction, the claim's `RETURNING version`
/// kept by `\gset` for the completion's version check.
fn script(claim: &StatementWithLiterals, completion: &StatementWithLiterals) -> String {
    let claim_sql = claim.inlined(&[(3, KEY_EXPRESSION)]);
    let completion_sql = completion.inlined(&[(3, KEY_EXPRESSION), (9, ":version")]);
    format!(
        "-- Written by idemkit-loadgen --pgbench-script: a new key's claim, then its\n\
         -- completion, each in autocommit, exactly as the PostgreSQL adapter sends them.\n\
         \\set r random(1, 9223372036854775806)\n\
         {claim_sql} \\gset\n\
         {completion_sql};\n"
    )
}
