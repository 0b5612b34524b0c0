//! `POST /appointments/{id}/notes` and `GET /appointments/{id}/notes`: the
//! service's Local route. A note lives in the service's own database, the one
//! that holds the idemkit records (a redb table of the store's file, or a
//! PostgreSQL table beside idemkit's), and is written **in the same transaction
//! as the record's completion**: a crash, an error or a lost lease keeps both
//! or neither, so a retry never writes a second note (`idemkit::local`).
//!
//! | store | the note's write | the transaction |
//! |---|---|---|
//! | redb (`--db`) | table `appointments.notes` of the store's file | `Execution::complete_with`: the completion's group-commit job |
//! | PostgreSQL (`--postgres`) | table `appointment_notes` in the store's schema | the handler's own, with `Execution::complete_in` inside it |

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, Response, StatusCode};
use idemkit::core::http::Refusal;
use idemkit::core::record::StoredResponse;
use idemkit::http::{Execution, refusal_response};
use idemkit::local::LocalError;
use redb::TableDefinition;

use super::{App, appointment_not_found, bearer_tenant, json_response, problem};
use crate::providers::Crash;

/// The operation name of `POST /appointments/{id}/notes` (effect Local).
pub(crate) const NOTE: &str = "appointments.note";

/// redb: (tenant, appointment id, note id) → the note's JSON.
const NOTES: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("appointments.notes");

/// The most bytes of a note's text.
const MAX_TEXT_BYTES: usize = 2_000;

/// The body of `POST /appointments/{id}/notes` (unknown members refused).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AddNote {
    text: String,
}

/// Creates the PostgreSQL notes table when the store is PostgreSQL (redb's
/// table is created by the first note).
pub(crate) fn prepare(store: &idemkit::store::Store) -> Result<(), String> {
    #[cfg(feature = "postgres")]
    if let Some(pg) = store.adapter_as::<idemkit::adapters::postgres::PostgresAdapter>() {
        let mut conn = pg.connection().map_err(|e| e.to_string())?;
        conn.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {} (tenant text NOT NULL, appointment_id text NOT NULL, \
             id text NOT NULL, note bytea NOT NULL, PRIMARY KEY (tenant, appointment_id, id))",
            pg_table(pg)
        ))
        .map_err(|e| format!("creating the notes table: {e}"))?;
    }
    let _ = store;
    Ok(())
}

#[cfg(feature = "postgres")]
fn pg_table(pg: &idemkit::adapters::postgres::PostgresAdapter) -> String {
    match pg.schema() {
        Some(schema) => format!("\"{schema}\".appointment_notes"),
        None => "appointment_notes".to_owned(),
    }
}

fn invalid_note(detail: &str) -> Response<Body> {
    problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-note",
        "The note is invalid",
        detail,
    )
}

/// 503 `note-not-saved`: nothing was committed; a retry with the same key
/// writes the note (the Local record is released).
fn not_saved(e: &dyn std::fmt::Display) -> Response<Body> {
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "note-not-saved",
        "The note was not saved",
        &format!("Nothing was written ({e}). Retry with the same Idempotency-Key."),
    );
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

/// The tenant's appointment `id`, or the 404 (another tenant's id is answered
/// exactly like an unknown one).
async fn own_appointment(app: &Arc<App>, tenant: &str, id: &str) -> Result<(), Response<Body>> {
    let (a, id) = (Arc::clone(app), id.to_owned());
    let booking = tokio::task::spawn_blocking(move || a.providers.booking(&id)).await;
    match booking {
        Ok(Ok(Some(b))) if b.tenant == tenant => Ok(()),
        Ok(Ok(_)) => Err(appointment_not_found()),
        Ok(Err(e)) => Err(super::bad_gateway("calendar", &e)),
        Err(e) => Err(super::bad_gateway("calendar", &e)),
    }
}

/// A fresh note id, ordered by creation time.
fn note_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut bytes = [0u8; 6];
    let _ = getrandom::fill(&mut bytes);
    format!("note_{millis:013}{}", idemkit_core::hex::Lower(&bytes))
}

pub(crate) async fn add_note(
    State(app): State<Arc<App>>,
    Extension(exec): Extension<Execution>,
    id: Result<Path<String>, PathRejection>,
    body: axum::body::Bytes,
) -> Response<Body> {
    let Ok(Path(appointment)) = id else {
        return appointment_not_found();
    };
    let text = match serde_json::from_slice::<AddNote>(&body) {
        Ok(note) if !note.text.is_empty() && note.text.len() <= MAX_TEXT_BYTES => note.text,
        _ => {
            return invalid_note(
                "Send a JSON object with exactly the member text: a non-empty string of at most 2000 bytes.",
            );
        }
    };
    let tenant = exec.tenant().to_owned();
    if let Err(response) = own_appointment(&app, &tenant, &appointment).await {
        return response;
    }
    let note = serde_json::json!({
        "id": note_id(),
        "appointment_id": appointment,
        "text": text,
    });
    let note_bytes = note.to_string().into_bytes();
    let mut response = StoredResponse::new(201, note_bytes.clone());
    response
        .headers
        .push(("content-type".into(), b"application/json".to_vec()));
    response.resource_ref = note["id"].as_str().map(str::to_owned);
    let row = Row {
        tenant,
        appointment,
        id: note["id"].as_str().unwrap_or_default().to_owned(),
        note: note_bytes,
    };
    match write(&app, &exec, row, response).await {
        // The layer answers the stored 201 whatever is returned here.
        Ok(()) => Response::new(Body::empty()),
        Err(response) => response,
    }
}

/// One note as stored.
#[derive(Clone)]
struct Row {
    tenant: String,
    appointment: String,
    id: String,
    note: Vec<u8>,
}

/// The fault switches, inside the transaction after the note was written.
fn inside_the_transaction(app: &App) {
    if app.crash_after_note_write
        && matches!(app.providers.take_crash(Crash::AfterNoteWrite), Ok(true))
    {
        eprintln!("appointments: --crash-after-note-write: aborting before the note's commit");
        std::process::abort();
    }
    if !app.note_write_delay.is_zero() {
        std::thread::sleep(app.note_write_delay);
    }
}

/// Writes `row` and completes the record with `response` in one transaction.
async fn write(
    app: &Arc<App>,
    exec: &Execution,
    row: Row,
    response: StoredResponse,
) -> Result<(), Response<Body>> {
    #[cfg(feature = "postgres")]
    if app
        .store
        .adapter_as::<idemkit::adapters::postgres::PostgresAdapter>()
        .is_some()
    {
        let (a, exec) = (Arc::clone(app), exec.clone());
        return tokio::task::spawn_blocking(move || write_postgres(&a, &exec, &row, response))
            .await
            .map_err(|e| not_saved(&e))?
            .map_err(|e| not_saved(&e));
    }
    let a = Arc::clone(app);
    exec.complete_with(
        move |txn| -> Result<(), redb::Error> {
            txn.open_table(NOTES)?.insert(
                (
                    row.tenant.as_str(),
                    row.appointment.as_str(),
                    row.id.as_str(),
                ),
                row.note.as_slice(),
            )?;
            inside_the_transaction(&a);
            Ok(())
        },
        response,
    )
    .await
    .map_err(|e: LocalError<redb::Error>| not_saved(&e))
}

/// PostgreSQL: the note's INSERT and the completion in the handler's own
/// transaction, committed by `complete_in`.
#[cfg(feature = "postgres")]
fn write_postgres(
    app: &App,
    exec: &Execution,
    row: &Row,
    response: StoredResponse,
) -> Result<(), String> {
    let Some(pg) = app
        .store
        .adapter_as::<idemkit::adapters::postgres::PostgresAdapter>()
    else {
        return Err("not a PostgreSQL store".to_owned());
    };
    let mut conn = pg.connection().map_err(|e| e.to_string())?;
    let mut txn = conn.transaction().map_err(|e| e.to_string())?;
    txn.execute(
        &format!(
            "INSERT INTO {} (tenant, appointment_id, id, note) VALUES ($1, $2, $3, $4)",
            pg_table(pg)
        ),
        &[&row.tenant, &row.appointment, &row.id, &row.note],
    )
    .map_err(|e| e.to_string())?;
    inside_the_transaction(app);
    // The completion's compare-and-set in the same transaction, then the commit.
    exec.complete_in(txn, response).map_err(|e| e.to_string())
}

pub(crate) async fn list_notes(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response<Body> {
    let Some(tenant) = bearer_tenant(&headers) else {
        return refusal_response(&Refusal::Unauthenticated);
    };
    let Ok(Path(appointment)) = id else {
        return appointment_not_found();
    };
    if let Err(response) = own_appointment(&app, &tenant, &appointment).await {
        return response;
    }
    let a = Arc::clone(&app);
    let listed = tokio::task::spawn_blocking(move || read_notes(&a, &tenant, &appointment)).await;
    match listed {
        Ok(Ok(notes)) => {
            let notes: Vec<serde_json::Value> = notes
                .iter()
                .filter_map(|bytes| serde_json::from_slice(bytes).ok())
                .collect();
            json_response(
                StatusCode::OK,
                &[("content-type", "application/json".to_owned())],
                serde_json::json!({ "notes": notes })
                    .to_string()
                    .into_bytes(),
            )
        }
        Ok(Err(e)) => not_saved_read(&e),
        Err(e) => not_saved_read(&e),
    }
}

/// 503 `store-unavailable` for a failed read of the notes.
fn not_saved_read(e: &dyn std::fmt::Display) -> Response<Body> {
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "store-unavailable",
        "The notes could not be read",
        &e.to_string(),
    )
}

/// The notes of the tenant's appointment, in id (creation) order.
fn read_notes(app: &App, tenant: &str, appointment: &str) -> Result<Vec<Vec<u8>>, String> {
    #[cfg(feature = "postgres")]
    if let Some(pg) = app
        .store
        .adapter_as::<idemkit::adapters::postgres::PostgresAdapter>()
    {
        let mut conn = pg.connection().map_err(|e| e.to_string())?;
        let rows = conn
            .query(
                &format!(
                    "SELECT note FROM {} WHERE tenant = $1 AND appointment_id = $2 ORDER BY id",
                    pg_table(pg)
                ),
                &[&tenant, &appointment],
            )
            .map_err(|e| e.to_string())?;
        return Ok(rows.iter().map(|row| row.get(0)).collect());
    }
    app.store
        .read_local(|txn| -> Result<Vec<Vec<u8>>, redb::Error> {
            let table = match txn.open_table(NOTES) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(e.into()),
            };
            table
                .range((tenant, appointment, "")..)?
                .map(|entry| {
                    entry.map(|(k, v)| {
                        (
                            k.value().0 == tenant && k.value().1 == appointment,
                            v.value().to_vec(),
                        )
                    })
                })
                .take_while(|entry| entry.as_ref().map_or(true, |(ours, _)| *ours))
                .map(|entry| entry.map(|(_, note)| note).map_err(redb::Error::from))
                .collect()
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}
