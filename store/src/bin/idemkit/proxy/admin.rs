//! The admin listener: `GET /healthz`, `GET /metrics` (Prometheus text),
//! `GET /records?state=unknown`, `POST /records/{log_ref}/resolve` (the semantics
//! of `idemkit resolve`). Everything but `/healthz` needs `Authorization: Bearer
//! <admin_token>` when a token is configured.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use http::{HeaderMap, Response, StatusCode, header};
use idemkit::core::machine::{Policy, Resolution};
use idemkit::core::record::{StateName, StoredResponse};
use idemkit::http::Metrics;
use idemkit::store::{ListedRecord, Store};

pub(crate) struct Admin {
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) token: Option<String>,
    /// The policy of each configured operation (resolve keeps a record's own
    /// windows; these fill in for records written before they were kept).
    pub(crate) policies: Vec<(String, Policy)>,
}

pub(crate) fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/records", get(records))
        .route("/records/{log_ref}/resolve", post(resolve))
        .with_state(admin)
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({ "error": message }))
}

/// Whether the request may use the admin API (always, without a token).
fn authorized(admin: &Admin, headers: &HeaderMap) -> bool {
    let Some(token) = &admin.token else {
        return true;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compared in full either way, so the time taken does not reveal a prefix.
    given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

fn unauthorized() -> Response<Body> {
    error(StatusCode::UNAUTHORIZED, "admin token required")
}

/// 200 while the store can write, 503 with the reason while it cannot.
async fn healthz(State(admin): State<Arc<Admin>>) -> Response<Body> {
    idemkit::http::health_response(admin.store.clone(), Some(Arc::clone(&admin.metrics))).await
}

async fn metrics(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> Response<Body> {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    // The writable gauge is as of this scrape.
    let store = admin.store.clone();
    if let Ok(health) = tokio::task::spawn_blocking(move || store.health()).await {
        admin.metrics.store_health(&health);
    }
    let mut response = Response::new(Body::from(admin.metrics.render()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    response
}

#[derive(serde::Deserialize)]
struct RecordsQuery {
    state: Option<String>,
}

fn view(r: &ListedRecord) -> serde_json::Value {
    serde_json::json!({
        "log_ref": r.log_ref().to_string(),
        "tenant": r.scope.tenant(),
        "operation": r.scope.operation(),
        "key": r.key.as_str(),
        "state": r.record.state.name().as_str(),
        "attempt": r.record.attempt,
        "created_at_ms": r.record.created_at.as_millis(),
        "updated_at_ms": r.record.updated_at.as_millis(),
    })
}

async fn records(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Query(query): Query<RecordsQuery>,
) -> Response<Body> {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    let state = match query.state.as_deref() {
        None => None,
        Some("unknown") => Some(StateName::Unknown),
        Some("running") => Some(StateName::Running),
        Some("completed") => Some(StateName::Completed),
        Some("released") => Some(StateName::Released),
        Some("unresolved") => {
            return blocking_list(&admin, |store| store.list_unresolved()).await;
        }
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "state {other:?}: expected unknown, running, completed, released or unresolved"
                ),
            );
        }
    };
    blocking_list(&admin, move |store| store.list(state)).await
}

async fn blocking_list(
    admin: &Admin,
    list: impl FnOnce(&Store) -> Result<Vec<ListedRecord>, idemkit::store::QueryError> + Send + 'static,
) -> Response<Body> {
    let store = admin.store.clone();
    match tokio::task::spawn_blocking(move || list(&store)).await {
        Ok(Ok(records)) => json(
            StatusCode::OK,
            &serde_json::json!({ "records": records.iter().map(view).collect::<Vec<_>>() }),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    /// Whether the effect happened.
    applied: bool,
    /// With `applied`: the status retries replay (default 200).
    status: Option<u16>,
    /// With `applied`: the body retries replay (UTF-8 text).
    body: Option<String>,
    resource_ref: Option<String>,
}

async fn resolve(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Path(log_ref): Path<String>,
    body: axum::body::Bytes,
) -> Response<Body> {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    let request: ResolveBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "expected {{\"applied\": true|false, \"status\"?, \"body\"?, \"resource_ref\"?}}: {e}"
                ),
            );
        }
    };
    let resolution = if request.applied {
        let mut response = StoredResponse::new(
            request.status.unwrap_or(200),
            request.body.unwrap_or_default().into_bytes(),
        );
        response.resource_ref = request.resource_ref;
        Resolution::Applied(response)
    } else {
        Resolution::NotApplied
    };
    let store = admin.store.clone();
    let policies = admin.policies.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let unresolved = store.list_unresolved().map_err(|e| e.to_string())?;
        let Some(found) = unresolved
            .into_iter()
            .find(|r| r.log_ref().to_string() == log_ref)
        else {
            return Ok(None);
        };
        let policy = policies
            .iter()
            .find(|(op, _)| op == found.scope.operation())
            .map_or_else(Policy::default, |(_, p)| *p);
        let from = found.record.state.name();
        store
            .resolve(&found.scope, &found.key, resolution, &policy)
            .map(|record| Some((found, from, record)))
            .map_err(|e| e.to_string())
    })
    .await;
    match outcome {
        Ok(Ok(Some((found, from, record)))) => json(
            StatusCode::OK,
            &serde_json::json!({
                "log_ref": found.log_ref().to_string(),
                "from": from.as_str(),
                "state": record.state.name().as_str(),
            }),
        ),
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            "no unresolved record with that log reference",
        ),
        Ok(Err(e)) => error(StatusCode::CONFLICT, &e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
