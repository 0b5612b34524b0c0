//! The admin listener: `GET /healthz`, `GET /metrics` (Prometheus text),
//! `GET /records?state=unknown` (paginated), `POST /records/{log_ref}/resolve`
//! (the semantics of `idemkit resolve`, each one logged and appended to the
//! audit log), and the operator console (`/console`, see [`crate::console`]).
//! Everything but `/healthz` and the console's login page needs
//! `Authorization: Bearer <admin_token>` (or a console session); the proxy and
//! the MCP gateway refuse to start an admin listener without a token unless
//! told to on a loopback address. It serves HTTPS with `admin_tls_cert_file`
//! and `admin_tls_key_file`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::routing::{get, post};
use http::{HeaderMap, Response, StatusCode, header};
use idemkit::core::machine::Policy;
use idemkit::core::record::{RecordState, StateName};
use idemkit::http::Metrics;
use idemkit::store::{ListedRecord, Listing, Store};

use crate::console::audit::AuditLog;
use crate::console::{self, Console};
use crate::listen_tls::{ListenTls, Settings};
use crate::proxy::forward::OverTls;

/// Records per page of `GET /records` unless `limit` says otherwise, and the most it may say.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

pub(crate) struct Admin {
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// `None` only for a loopback listener started with `admin_insecure_no_token`.
    pub(crate) token: Option<String>,
    /// The policy of each configured operation (resolve keeps a record's own
    /// windows; these fill in for records written before they were kept).
    pub(crate) policies: Vec<(String, Policy)>,
    /// The console's sessions, audit log and chart samples.
    pub(crate) console: Console,
}

impl Admin {
    /// The admin state over `store`, with the console's audit log at `audit_log`
    /// (`None`: not configured, so the console and the admin API show records
    /// but refuse to resolve them). Starts the console's chart sampling, so
    /// it is called inside the runtime.
    pub(crate) fn start(
        store: Store,
        metrics: Arc<Metrics>,
        token: Option<String>,
        policies: Vec<(String, Policy)>,
        audit_log: Option<&std::path::Path>,
    ) -> Result<Arc<Admin>, String> {
        let audit = match audit_log {
            Some(path) => Ok(AuditLog::open(path)?),
            None => Err(
                "no audit log is configured (audit_log = \"PATH\"): the console shows \
                         records but resolves none, since an operator's resolve must leave a trace"
                    .to_owned(),
            ),
        };
        let console = Console::new(audit);
        console.samples.spawn(store.clone(), Arc::clone(&metrics));
        Ok(Arc::new(Admin {
            store,
            metrics,
            token,
            policies,
            console,
        }))
    }
}

/// Serves the admin API on `addr` (over TLS with `tls`, which the settings
/// `tls_settings` give) until `stop` turns true; returns its URL (`https://`
/// or `http://`, then the bound address). `program` names the command in the
/// warnings printed when the listener runs without a token, or in plain HTTP
/// beyond this host.
pub(crate) async fn serve(
    program: &str,
    addr: &str,
    (tls, tls_settings): (Option<ListenTls>, Settings),
    admin: Arc<Admin>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("admin {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("admin {addr}: {e}"))?;
    if admin.token.is_none() {
        eprintln!(
            "idemkit {program}: the admin listener on {bound} has no token \
             (admin_insecure_no_token): anyone on this host can list keys and resolve records"
        );
    }
    if tls.is_none() && !bound.ip().is_loopback() {
        eprintln!(
            "idemkit {program}: the admin listener on {bound} serves plain HTTP beyond this host: \
             its token and console sessions cross the network unencrypted; set \
             {} and {}, or listen on a loopback address",
            tls_settings.cert, tls_settings.key
        );
    }
    let mut app = router(Arc::clone(&admin));
    let url = match &tls {
        None => format!("http://{bound}"),
        Some(tls) => {
            tls.observed_by(&admin.metrics);
            // The console's session cookie is then `Secure`.
            app = app.layer(axum::Extension(OverTls));
            format!("https://{bound}")
        }
    };
    // The admin API logs who resolved what: the router gets the caller's address.
    tokio::spawn(crate::listen_tls::serve_router(
        tls,
        listener,
        idemkit::http::DEFAULT_HEADER_READ_TIMEOUT,
        app,
        crate::stopped(stop),
    ));
    Ok(url)
}

pub(crate) fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/records", get(records))
        .route("/records/{log_ref}/resolve", post(resolve))
        .merge(console::routes())
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

/// Whether the request may use the admin API (always, without a token: the
/// config allows that only on a loopback address, on request).
pub(crate) fn authorized(admin: &Admin, headers: &HeaderMap) -> bool {
    let Some(token) = &admin.token else {
        return true;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|g| console::session::same_secret(g, token))
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
    admin.metrics.store_waiting(&admin.store);
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
#[serde(deny_unknown_fields)]
struct RecordsQuery {
    state: Option<String>,
    /// Records per page (default 100, at most 1000).
    limit: Option<usize>,
    /// The `next` of the previous page.
    after: Option<String>,
    /// Whether each record's stored response comes with it.
    bodies: Option<bool>,
}

fn view(r: &ListedRecord, bodies: bool) -> serde_json::Value {
    let mut view = serde_json::json!({
        "log_ref": r.log_ref().to_string(),
        "tenant": r.scope.tenant(),
        "operation": r.scope.operation(),
        "key": r.key.as_str(),
        "state": r.record.state.name().as_str(),
        "attempt": r.record.attempt,
        "created_at_ms": r.record.created_at.as_millis(),
        "updated_at_ms": r.record.updated_at.as_millis(),
    });
    if bodies
        && let (RecordState::Completed { response, .. }, Some(object)) =
            (&r.record.state, view.as_object_mut())
    {
        let mut stored = serde_json::json!({
            "status": response.status,
            "resource_ref": response.resource_ref,
        });
        if let (Some(body), Some(fields)) = (&response.body, stored.as_object_mut()) {
            match std::str::from_utf8(body) {
                Ok(text) => fields.insert("body".to_owned(), text.into()),
                Err(_) => {
                    fields.insert("body_hex".to_owned(), idemkit_core::hex::lower(body).into())
                }
            };
        }
        object.insert("response".to_owned(), stored);
    }
    view
}

/// A page's size (`limit`: 1 to `max`, else `default`) and where it starts
/// (`after`: the `next` of an earlier page), or what is wrong with them.
pub(crate) fn page_args(
    limit: Option<usize>,
    after: Option<&str>,
    default: usize,
    max: usize,
) -> Result<(usize, Option<Vec<u8>>), String> {
    let limit = match limit {
        None => default,
        Some(n) if (1..=max).contains(&n) => n,
        Some(n) => return Err(format!("limit {n}: expected 1 to {max}")),
    };
    let after = match after.map(idemkit_core::hex::decode) {
        None => None,
        Some(Some(cursor)) => Some(cursor),
        Some(None) => return Err("after: expected the `next` of an earlier page".to_owned()),
    };
    Ok((limit, after))
}

async fn records(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    query: Result<Query<RecordsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response<Body> {
    if !authorized(&admin, &headers) {
        return unauthorized();
    }
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("{e}: expected state, limit (1 to {MAX_PAGE}), after and bodies"),
            );
        }
    };
    let listing = match query.state.as_deref() {
        None => Listing::All,
        Some("unknown") => Listing::State(StateName::Unknown),
        Some("running") => Listing::State(StateName::Running),
        Some("completed") => Listing::State(StateName::Completed),
        Some("released") => Listing::State(StateName::Released),
        Some("unresolved") => Listing::Unresolved,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "state {other:?}: expected unknown, running, completed, released or unresolved"
                ),
            );
        }
    };
    let (limit, after) =
        match page_args(query.limit, query.after.as_deref(), DEFAULT_PAGE, MAX_PAGE) {
            Ok(page) => page,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e),
        };
    let bodies = query.bodies.unwrap_or(false);
    let store = admin.store.clone();
    let page =
        tokio::task::spawn_blocking(move || store.list_page(listing, after.as_deref(), limit))
            .await;
    match page {
        Ok(Ok(page)) => json(
            StatusCode::OK,
            &serde_json::json!({
                "records": page.records.iter().map(|r| view(r, bodies)).collect::<Vec<_>>(),
                "next": page.next.as_deref().map(idemkit_core::hex::lower),
            }),
        ),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The unresolved record of `log_ref`, page by page (memory bounded by a page).
fn find_unresolved(
    store: &Store,
    log_ref: &str,
) -> Result<Option<ListedRecord>, idemkit::store::QueryError> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.list_page(Listing::Unresolved, after.as_deref(), MAX_PAGE)?;
        if let Some(found) = page
            .records
            .into_iter()
            .find(|r| r.log_ref().to_string() == log_ref)
        {
            return Ok(Some(found));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(None),
        }
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
    /// Who resolves (for the log; the token says only that it is an operator).
    by: Option<String>,
    /// Why, for the audit log.
    note: Option<String>,
}

async fn resolve(
    State(admin): State<Arc<Admin>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(log_ref): Path<String>,
    body: axum::body::Bytes,
) -> Response<Body> {
    if !authorized(&admin, &headers) {
        crate::log::line(format_args!(
            "idemkit proxy: resolve {log_ref:?} refused: no valid admin token (from {peer})"
        ));
        return unauthorized();
    }
    let request: ResolveBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            crate::log::line(format_args!(
                "idemkit proxy: resolve {log_ref:?} refused: malformed request (from {peer})"
            ));
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "expected {{\"applied\": true|false, \"status\"?, \"body\"?, \"resource_ref\"?, \"by\"?, \"note\"?}}: {e}"
                ),
            );
        }
    };
    let store = admin.store.clone();
    let wanted = log_ref.clone();
    let found = tokio::task::spawn_blocking(move || find_unresolved(&store, &wanted)).await;
    let found = match found {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) => {
            crate::log::line(format_args!(
                "idemkit proxy: resolve {log_ref:?} (from {peer}): no unresolved record with that log reference"
            ));
            return error(
                StatusCode::NOT_FOUND,
                "no unresolved record with that log reference",
            );
        }
        Ok(Err(e)) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let settle = console::Settle {
        resolution: console::resolution(
            request.applied,
            request.status,
            request.body,
            request.resource_ref,
        ),
        seen: None,
        operator: request
            .by
            .unwrap_or_else(|| "an unnamed operator".to_owned()),
        peer,
        note: request.note.filter(|n| !n.trim().is_empty()),
        audit_required: false,
    };
    match settle.run(&admin, found).await {
        Ok(done) => json(StatusCode::OK, &done),
        Err(console::Refused::Changed(message)) => error(StatusCode::CONFLICT, &message),
        Err(console::Refused::Other(status, message)) => error(status, &message),
    }
}
