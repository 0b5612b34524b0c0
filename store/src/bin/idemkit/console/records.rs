//! The console's JSON API: records (filtered, searched, one by id, its body
//! on request), resolving one at the version the page showed, the audit log
//! and the chart samples. Every route needs the admin token or a session;
//! the resolve also the session's CSRF token.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::routing::{get, post};
use http::{HeaderMap, Response, StatusCode};
use idemkit::adapters::Version;
use idemkit::core::machine::{Policy, Resolution};
use idemkit::core::record::{Record, RecordState, StateName, StoredResponse};
use idemkit::core::{RecordId, UnixMillis};
use idemkit::store::{ListedRecord, Listing, Store, WorkerError};
use serde_json::{Value, json};

use super::audit::AuditEntry;
use super::samples::{INTERVAL, Samples};
use super::{api_error, api_json, caller, changer};
use crate::proxy::admin::{Admin, page_args};
use crate::records_cmd::{headers_json, step_json};
use idemkit_core::hex::{decode as unhex, lower as hex};

/// Records per page unless `limit` says otherwise, and the most it may say.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;
/// Records a filtered page reads at most before answering with what it found
/// (and a cursor to go on): a search never holds a request for a whole store.
const SCAN_BUDGET: usize = 20_000;
/// The longest note kept with a resolve.
const MAX_NOTE: usize = 4_096;

pub(super) fn routes() -> Router<Arc<Admin>> {
    Router::new()
        .route("/console/api/records", get(list))
        .route("/console/api/records/{id}", get(detail))
        .route("/console/api/records/{id}/body", get(body))
        .route("/console/api/records/{id}/resolve", post(resolve))
        .route("/console/api/audit", get(audit))
        .route("/console/api/metrics", get(metrics))
}

fn unauthorized() -> Response<Body> {
    api_error(StatusCode::UNAUTHORIZED, "admin token or session required")
}

/// When the record entered its state.
fn since(record: &Record) -> UnixMillis {
    match &record.state {
        RecordState::Running { .. } => record.updated_at,
        RecordState::Completed { completed_at, .. } => *completed_at,
        RecordState::Unknown { since, .. } => *since,
        RecordState::Released { at } => *at,
    }
}

/// What a retry of the record's key is answered now (the status and problem
/// name of the HTTP contract), for the operator to see what clients are told.
fn told(record: &Record, now: UnixMillis) -> Value {
    let (status, problem, detail) = match &record.state {
        RecordState::Running { lease } if now < lease.expires_at => (
            Some(409),
            Some("request-in-progress"),
            "an attempt holds the lease; retries are told to come back".to_owned(),
        ),
        RecordState::Running { .. } => match record.effect {
            idemkit::core::record::EffectKind::External => (
                Some(409),
                Some("outcome-uncertain"),
                "the lease expired: the next retry finds the outcome unknown".to_owned(),
            ),
            _ => (
                None,
                None,
                "the lease expired: the next retry runs the operation again".to_owned(),
            ),
        },
        RecordState::Completed { response, .. }
            if record.replay_until.is_none_or(|until| now < until) =>
        {
            (
                Some(response.status),
                None,
                "retries get the stored response".to_owned(),
            )
        }
        RecordState::Completed { .. } => (
            Some(410),
            Some("response-expired"),
            "completed, and the response is no longer kept".to_owned(),
        ),
        RecordState::Unknown { reason, .. } => (
            Some(409),
            Some("outcome-uncertain"),
            format!("the outcome is unknown ({reason}): retries are refused until it is resolved"),
        ),
        RecordState::Released { .. } => (
            None,
            None,
            "the attempt failed without effect: the next retry runs the operation".to_owned(),
        ),
    };
    json!({ "status": status, "problem": problem, "detail": detail })
}

fn millis(at: Option<UnixMillis>) -> Value {
    at.map_or(Value::Null, |t| t.as_millis().into())
}

/// A record as the list shows it: never a body.
fn summary(r: &ListedRecord, now: UnixMillis) -> Value {
    let record = &r.record;
    let since = since(record);
    let lease = match &record.state {
        RecordState::Running { lease } => json!({
            "owner": lease.owner,
            "expires_at_ms": lease.expires_at.as_millis(),
            "expired": now >= lease.expires_at,
        }),
        _ => Value::Null,
    };
    let reason = match &record.state {
        RecordState::Unknown { reason, .. } => Value::from(reason.to_string()),
        _ => Value::Null,
    };
    let steps: Vec<Value> = record.steps.iter().map(step_json).collect();
    json!({
        "id": hex(r.scope.record_id(&r.key).as_bytes()),
        "log_ref": r.log_ref().to_string(),
        "tenant": r.scope.tenant(),
        "operation": r.scope.operation(),
        "key": r.key.as_str(),
        "state": record.state.name().as_str(),
        "reason": reason,
        "attempt": record.attempt,
        "created_at_ms": record.created_at.as_millis(),
        "updated_at_ms": record.updated_at.as_millis(),
        "since_ms": since.as_millis(),
        "age_ms": now.as_millis().saturating_sub(since.as_millis()),
        "lease": lease,
        "steps": steps,
        "told": told(record, now),
        "version": r.version.0.to_string(),
    })
}

/// A record with everything the detail view shows but its body.
fn detail_view(r: &ListedRecord, now: UnixMillis) -> Value {
    let mut view = summary(r, now);
    let record = &r.record;
    let (completed_at, response) = match &record.state {
        RecordState::Completed {
            response,
            completed_at,
        } => (Some(*completed_at), Some(response_view(response))),
        _ => (None, None),
    };
    if let Some(fields) = view.as_object_mut() {
        fields.insert("effect".into(), record.effect.to_string().into());
        fields.insert("fingerprint".into(), record.fingerprint.to_string().into());
        fields.insert(
            "windows".into(),
            record.windows.map_or(
                Value::Null,
                |w| json!({ "replay_ms": w.replay_ms, "record_ms": w.record_ms }),
            ),
        );
        fields.insert("replay_until_ms".into(), millis(record.replay_until));
        fields.insert("keep_until_ms".into(), millis(record.keep_until));
        fields.insert("completed_at_ms".into(), millis(completed_at));
        fields.insert("response".into(), response.unwrap_or(Value::Null));
    }
    view
}

fn response_view(response: &StoredResponse) -> Value {
    json!({
        "status": response.status,
        "headers": headers_json(&response.headers),
        "resource_ref": response.resource_ref,
        "body_bytes": response.body.as_ref().map(Vec::len),
    })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    view: Option<String>,
    operation: Option<String>,
    tenant: Option<String>,
    /// A log reference (or its beginning) or an idempotency key.
    q: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

fn listing(view: Option<&str>) -> Result<Listing, String> {
    Ok(match view.unwrap_or("attention") {
        "attention" => Listing::Unresolved,
        "all" => Listing::All,
        "unknown" => Listing::State(StateName::Unknown),
        "running" => Listing::State(StateName::Running),
        "completed" => Listing::State(StateName::Completed),
        "released" => Listing::State(StateName::Released),
        other => {
            return Err(format!(
                "view {other:?}: expected attention, all, unknown, running, completed or released"
            ));
        }
    })
}

/// Whether `r` passes the list's filters and search.
fn matches(r: &ListedRecord, query: &ListQuery) -> bool {
    let exact = |filter: &Option<String>, value: &str| {
        filter
            .as_deref()
            .filter(|f| !f.is_empty())
            .is_none_or(|f| f == value)
    };
    let searched = query
        .q
        .as_deref()
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .is_none_or(|q| {
            r.key.as_str() == q || r.log_ref().to_string().starts_with(&q.to_ascii_lowercase())
        });
    exact(&query.operation, r.scope.operation())
        && exact(&query.tenant, r.scope.tenant())
        && searched
}

async fn list(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response<Body> {
    if caller(&admin, &headers).is_none() {
        return unauthorized();
    }
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                &format!("{e}: expected view, operation, tenant, q, limit and after"),
            );
        }
    };
    let listing = match listing(query.view.as_deref()) {
        Ok(l) => l,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, &e),
    };
    let (limit, after) =
        match page_args(query.limit, query.after.as_deref(), DEFAULT_PAGE, MAX_PAGE) {
            Ok(page) => page,
            Err(e) => return api_error(StatusCode::BAD_REQUEST, &e),
        };
    let store = admin.store.clone();
    let found = tokio::task::spawn_blocking(move || {
        let now = store.now();
        let mut found: Vec<ListedRecord> = Vec::new();
        let mut read = 0;
        let mut after = after;
        let next = loop {
            // Never more than the page still needs: every record read is
            // either answered or behind the cursor handed back, none skipped.
            let page = store
                .list_page(listing, after.as_deref(), limit - found.len())
                .map_err(|e| e.to_string())?;
            read += page.records.len().max(1);
            found.extend(page.records.into_iter().filter(|r| matches(r, &query)));
            match page.next {
                Some(next) if found.len() < limit && read < SCAN_BUDGET => after = Some(next),
                next => break next,
            }
        };
        Ok::<_, String>((found, next, now))
    })
    .await;
    let (found, next, now) = match found {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return api_error(StatusCode::SERVICE_UNAVAILABLE, &e),
        Err(e) => return api_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut operations: Vec<&str> = found.iter().map(|r| r.scope.operation()).collect();
    operations.sort_unstable();
    operations.dedup();
    let mut tenants: Vec<&str> = found.iter().map(|r| r.scope.tenant()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    api_json(
        StatusCode::OK,
        &json!({
            "records": found.iter().map(|r| summary(r, now)).collect::<Vec<_>>(),
            "next": next.as_deref().map(hex),
            "operations": operations,
            "tenants": tenants,
        }),
    )
}

/// The scope and key of a console id (hex of the record id), if it is one.
fn record_address(id: &str) -> Option<(idemkit::core::Scope, idemkit::core::IdempotencyKey)> {
    unhex(id).and_then(|bytes| RecordId::decode(&bytes).ok())
}

/// The record a console URL names by its id (hex of the record id).
async fn find(admin: &Admin, id: &str) -> Result<(ListedRecord, UnixMillis), Response<Body>> {
    let Some((scope, key)) = record_address(id) else {
        return Err(api_error(
            StatusCode::BAD_REQUEST,
            "the record id is not one the console listed",
        ));
    };
    let store = admin.store.clone();
    let found = tokio::task::spawn_blocking(move || {
        store
            .get_listed(&scope, &key)
            .map(|r| r.map(|r| (r, store.now())))
    })
    .await;
    match found {
        Ok(Ok(Some(found))) => Ok(found),
        Ok(Ok(None)) => Err(api_error(
            StatusCode::NOT_FOUND,
            "no record with this id (deleted after its record window?)",
        )),
        Ok(Err(e)) => Err(api_error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
        Err(e) => Err(api_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
    }
}

async fn detail(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response<Body> {
    if caller(&admin, &headers).is_none() {
        return unauthorized();
    }
    match find(&admin, &id).await {
        Ok((record, now)) => api_json(StatusCode::OK, &detail_view(&record, now)),
        Err(refused) => refused,
    }
}

async fn body(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response<Body> {
    if caller(&admin, &headers).is_none() {
        return unauthorized();
    }
    let (record, _) = match find(&admin, &id).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let RecordState::Completed { response, .. } = &record.record.state else {
        return api_error(StatusCode::NOT_FOUND, "the record holds no response");
    };
    let Some(body) = &response.body else {
        return api_error(
            StatusCode::NOT_FOUND,
            "the response body is no longer kept (past the replay window)",
        );
    };
    let value = match std::str::from_utf8(body) {
        Ok(text) => json!({ "body": text }),
        Err(_) => json!({ "body_hex": hex(body) }),
    };
    api_json(StatusCode::OK, &value)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveRequest {
    applied: bool,
    status: Option<u16>,
    body: Option<String>,
    resource_ref: Option<String>,
    note: Option<String>,
    /// The record's `version` as the page showed it.
    version: Option<String>,
}

async fn resolve(
    State(admin): State<Arc<Admin>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response<Body> {
    let caller = match changer(&admin, &headers) {
        Ok(caller) => caller,
        Err((status, why)) => {
            crate::log::line(format_args!(
                "idemkit console: resolve refused (from {peer}): {why}"
            ));
            return api_error(status, why);
        }
    };
    let request: ResolveRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "expected {{\"applied\", \"status\"?, \"body\"?, \"resource_ref\"?, \"note\", \"version\"}}: {e}"
                ),
            );
        }
    };
    let note = request.note.as_deref().map(str::trim).unwrap_or_default();
    if note.is_empty() || note.len() > MAX_NOTE {
        return api_error(
            StatusCode::BAD_REQUEST,
            &format!("note: say why (1 to {MAX_NOTE} bytes); it goes into the audit log"),
        );
    }
    let Some(seen) = request
        .version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .map(Version)
    else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "version: send the record's version as the page showed it",
        );
    };
    let (found, _) = match find(&admin, &id).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let settle = Settle {
        resolution: resolution(
            request.applied,
            request.status,
            request.body,
            request.resource_ref,
        ),
        seen: Some(seen),
        operator: caller.operator,
        peer,
        note: Some(note.to_owned()),
        audit_required: true,
    };
    match settle.run(&admin, found).await {
        Ok(done) => api_json(StatusCode::OK, &done),
        Err(Refused::Changed(message)) => api_json(
            StatusCode::CONFLICT,
            &json!({ "error": message, "changed": true }),
        ),
        Err(Refused::Other(status, message)) => api_error(status, &message),
    }
}

/// The resolution an operator asked for.
pub(crate) fn resolution(
    applied: bool,
    status: Option<u16>,
    body: Option<String>,
    resource_ref: Option<String>,
) -> Resolution {
    if applied {
        let mut response =
            StoredResponse::new(status.unwrap_or(200), body.unwrap_or_default().into_bytes());
        response.resource_ref = resource_ref.filter(|r| !r.is_empty());
        Resolution::Applied(response)
    } else {
        Resolution::NotApplied
    }
}

/// One operator's resolve, from the console or the admin API: written to the
/// store (at the version seen, when given), then to the audit log, then to
/// the process's log.
pub(crate) struct Settle {
    pub(crate) resolution: Resolution,
    /// The version the operator saw; `None` (the admin API): whatever is stored.
    pub(crate) seen: Option<Version>,
    pub(crate) operator: String,
    pub(crate) peer: SocketAddr,
    pub(crate) note: Option<String>,
    /// Whether to refuse when no audit log is configured (the console does;
    /// the admin API then logs to the process's log alone, as it always did).
    pub(crate) audit_required: bool,
}

pub(crate) enum Refused {
    /// The record changed since the version seen.
    Changed(String),
    Other(StatusCode, String),
}

impl Settle {
    /// Resolves `found`; answers what the admin API and the console return.
    pub(crate) async fn run(self, admin: &Admin, found: ListedRecord) -> Result<Value, Refused> {
        // Without an audit log, the console settles nothing: an operator's
        // change from a page must leave a trace beyond the process's log.
        let audit = match (&admin.console.audit, self.audit_required) {
            (Ok(audit), _) => Some(audit),
            (Err(why), true) => {
                return Err(Refused::Other(StatusCode::SERVICE_UNAVAILABLE, why.clone()));
            }
            (Err(_), false) => None,
        };
        let (applied, status, resource_ref) = match &self.resolution {
            Resolution::Applied(r) => (true, Some(r.status), r.resource_ref.clone()),
            _ => (false, None, None),
        };
        let policy = admin
            .policies
            .iter()
            .find(|(op, _)| op == found.scope.operation())
            .map_or_else(Policy::default, |(_, p)| *p);
        let store: Store = admin.store.clone();
        let (scope, key, from) = (
            found.scope.clone(),
            found.key.clone(),
            found.record.state.name(),
        );
        let resolution = self.resolution;
        let seen = self.seen;
        let written = tokio::task::spawn_blocking(move || match seen {
            Some(seen) => store.resolve_seen(&scope, &key, resolution, &policy, seen),
            None => store.resolve(&scope, &key, resolution, &policy),
        })
        .await;
        let log_ref = found.log_ref().to_string();
        let what = if applied {
            format!("applied, status {}", status.unwrap_or(200))
        } else {
            "not applied".to_owned()
        };
        let record = match written {
            Ok(Ok(record)) => record,
            Ok(Err(e)) => {
                crate::log::line(format_args!(
                    "idemkit console: resolve {log_ref} by {:?} from {}: {what}: refused: {e}",
                    self.operator, self.peer
                ));
                return Err(match e {
                    WorkerError::Changed { .. } => Refused::Changed(format!(
                        "record {log_ref} changed since the page loaded it: reload to see it as it is now"
                    )),
                    WorkerError::Storage(e) => {
                        Refused::Other(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
                    }
                    e => Refused::Other(StatusCode::CONFLICT, e.to_string()),
                });
            }
            Err(e) => {
                return Err(Refused::Other(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    e.to_string(),
                ));
            }
        };
        let to = record.state.name();
        let entry = AuditEntry {
            at_ms: record.updated_at.as_millis(),
            operator: self.operator,
            peer: self.peer.to_string(),
            log_ref: log_ref.clone(),
            tenant: found.scope.tenant().to_owned(),
            operation: found.scope.operation().to_owned(),
            from: from.as_str().to_owned(),
            to: to.as_str().to_owned(),
            applied,
            status,
            resource_ref,
            note: self.note,
        };
        crate::log::line(format_args!(
            "idemkit console: resolve {log_ref} ({}, {}) by {:?} from {}: {what}: {} -> {}",
            entry.operation, entry.tenant, entry.operator, entry.peer, entry.from, entry.to
        ));
        if let Some(Err(e)) = audit.map(|log| log.append(&entry)) {
            // Resolved, but without its trace: say so loudly, with the entry.
            let line = serde_json::to_string(&entry).unwrap_or_default();
            crate::log::line(format_args!(
                "idemkit console: {e}: the entry not written: {line}"
            ));
            return Err(Refused::Other(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("resolved, but the audit log could not be written: {e}"),
            ));
        }
        Ok(json!({ "log_ref": log_ref, "from": entry.from, "state": entry.to }))
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    limit: Option<usize>,
    /// Only the entries of this record (its console id).
    record: Option<String>,
}

async fn audit(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response<Body> {
    if caller(&admin, &headers).is_none() {
        return unauthorized();
    }
    let Ok(Query(query)) = query else {
        return api_error(StatusCode::BAD_REQUEST, "expected limit and record");
    };
    let limit = match query.limit {
        None => 200,
        Some(n @ 1..=5_000) => n,
        Some(_) => return api_error(StatusCode::BAD_REQUEST, "limit: expected 1 to 5000"),
    };
    let log_ref = match query.record.as_deref() {
        None => None,
        Some(id) => match record_address(id) {
            Some((scope, key)) => Some(scope.record_id(&key).log_ref().to_string()),
            None => {
                return api_error(
                    StatusCode::BAD_REQUEST,
                    "record: expected a record id the console listed",
                );
            }
        },
    };
    let entries = match &admin.console.audit {
        Ok(log) => log.newest_of(limit, log_ref.as_deref()),
        Err(why) => Err(why.clone()),
    };
    match entries {
        Ok(entries) => api_json(StatusCode::OK, &json!({ "entries": entries })),
        Err(e) => api_error(StatusCode::SERVICE_UNAVAILABLE, &e),
    }
}

async fn metrics(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> Response<Body> {
    if caller(&admin, &headers).is_none() {
        return unauthorized();
    }
    let mut samples = admin.console.samples.all();
    // The charts end at this moment, not at the last tick.
    if let Some(now) = Samples::take(&admin.store, &admin.metrics).await {
        samples.push(now);
    }
    api_json(
        StatusCode::OK,
        &json!({
            "interval_ms": u64::try_from(INTERVAL.as_millis()).unwrap_or(u64::MAX),
            "samples": samples,
        }),
    )
}
