//! The operator console: a page on the admin listener (`/console`, and the
//! whole of `idemkit console`) that shows the records needing a person
//! (Unknown, and Running past their lease), their steps and what retries are
//! told, and lets an operator settle one with a note.
//!
//! Security, in order of the request's path:
//! - nothing but the login page and its stylesheet is served without the
//!   admin token (`Authorization: Bearer`) or a session;
//! - a session starts from a token login and lives in an `HttpOnly`,
//!   `SameSite=Strict` cookie (also `Secure` when the listener serves TLS:
//!   `admin_tls_cert_file`, or `idemkit console --tls-cert-file`); every change also needs the session's CSRF
//!   token in `X-CSRF-Token`, and a foreign `Origin` is refused;
//! - every answer forbids inline scripts and framing (`Content-Security-Policy`)
//!   and caching; listings never carry bodies;
//! - a resolve names the record version the page showed and is refused if the
//!   record changed since, and every resolve is appended to the audit log
//!   before it is answered.

pub(crate) mod audit;
pub(crate) mod command;
mod records;
pub(crate) mod samples;
pub(crate) mod session;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Form, State};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use crate::proxy::admin::Admin;
use crate::proxy::forward::OverTls;
use audit::AuditLog;
pub(crate) use records::{Refused, Settle, resolution};
use samples::Samples;
use session::{Session, Sessions};

/// The page's policy: scripts and styles only from the console itself, no
/// inline script or style, no plugins, no framing, forms post only here.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

const LOGIN_HTML: &str = include_str!("assets/login.html");
const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_CSS: &str = include_str!("assets/console.css");
const CONSOLE_JS: &str = include_str!("assets/console.js");

/// What the console keeps beside the admin API's state.
pub(crate) struct Console {
    pub(crate) sessions: Sessions,
    /// Where resolves are recorded; without it the console shows records
    /// but refuses to settle them, saying why.
    pub(crate) audit: Result<AuditLog, String>,
    pub(crate) samples: Arc<Samples>,
}

impl Console {
    pub(crate) fn new(audit: Result<AuditLog, String>) -> Console {
        Console {
            sessions: Sessions::default(),
            audit,
            samples: Arc::default(),
        }
    }
}

/// The console's routes, merged into the admin listener's router.
pub(crate) fn routes() -> Router<Arc<Admin>> {
    Router::new()
        .route("/console", get(app))
        .route("/console/", get(app))
        .route("/console/login", get(login_page).post(login))
        .route("/console/logout", post(logout))
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/assets/console.js", get(script))
        .merge(records::routes())
}

/// Who is asking, once authenticated.
pub(crate) struct Caller {
    /// The operator's name for the audit log.
    pub(crate) operator: String,
    /// The session, when the request came from the page (a bearer token
    /// needs no CSRF token: a browser never sends it by itself).
    pub(crate) session: Option<Session>,
}

/// The caller, by admin token or session cookie.
pub(crate) fn caller(admin: &Admin, headers: &HeaderMap) -> Option<Caller> {
    if admin.token.is_some() && crate::proxy::admin::authorized(admin, headers) {
        let named = headers
            .get("x-operator")
            .and_then(|v| v.to_str().ok())
            .filter(|n| !n.trim().is_empty());
        return Some(Caller {
            operator: named.unwrap_or("admin token").to_owned(),
            session: None,
        });
    }
    let session = admin.console.sessions.of(headers)?;
    Some(Caller {
        operator: session.operator.clone(),
        session: Some(session),
    })
}

/// Why a change was refused: the status and the message to answer with.
pub(crate) type Refusal = (StatusCode, &'static str);

/// The caller of a change: also checks the CSRF token of a session and the
/// request's origin.
pub(crate) fn changer(admin: &Admin, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let Some(caller) = caller(admin, headers) else {
        return Err((StatusCode::UNAUTHORIZED, "admin token or session required"));
    };
    if let Some(session) = &caller.session {
        let given = headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !session::same_secret(given, &session.csrf) {
            return Err((
                StatusCode::FORBIDDEN,
                "missing or wrong X-CSRF-Token: reload the console",
            ));
        }
        if !same_origin(headers) {
            return Err((
                StatusCode::FORBIDDEN,
                "the request came from another origin",
            ));
        }
    }
    Ok(caller)
}

/// Whether the request's `Origin`, when a browser sent one, is this host.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|authority| authority == host)
}

/// The headers every console answer carries.
fn guarded(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        // Not `no-referrer`: with it a browser sends `Origin: null`, and the
        // origin check refuses its own forms.
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Body>,
) -> Response<Body> {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    guarded(response)
}

pub(crate) fn api_json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    with_type(status, "application/json", value.to_string())
}

pub(crate) fn api_error(status: StatusCode, message: &str) -> Response<Body> {
    api_json(status, &serde_json::json!({ "error": message }))
}

fn see_other(location: &'static str) -> Response<Body> {
    let mut response = with_type(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(location));
    response
}

/// Text made safe to place in HTML, inside an element or an attribute.
fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn login_with(status: StatusCode, error: &str) -> Response<Body> {
    let page = LOGIN_HTML.replace("{{error}}", &escape_html(error));
    with_type(status, "text/html; charset=utf-8", page)
}

async fn login_page() -> Response<Body> {
    login_with(StatusCode::OK, "")
}

#[derive(serde::Deserialize)]
struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    token: String,
}

/// The longest operator name kept (it goes into every audit entry).
const MAX_NAME: usize = 100;

async fn login(
    State(admin): State<Arc<Admin>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    over_tls: Option<Extension<OverTls>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response<Body> {
    if !same_origin(&headers) {
        return login_with(StatusCode::FORBIDDEN, "The login came from another site.");
    }
    let Ok(Form(form)) = form else {
        return login_with(
            StatusCode::BAD_REQUEST,
            "Give your name and the admin token.",
        );
    };
    let name = form.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return login_with(
            StatusCode::BAD_REQUEST,
            &format!(
                "Give your name (1 to {MAX_NAME} characters): the audit log names who resolved what."
            ),
        );
    }
    let token_ok = match &admin.token {
        Some(token) => session::same_secret(&form.token, token),
        // A loopback listener the configuration opened without a token.
        None => true,
    };
    if !token_ok {
        crate::log::line(format_args!(
            "idemkit console: login refused: wrong admin token (from {peer})"
        ));
        return login_with(StatusCode::UNAUTHORIZED, "That is not the admin token.");
    }
    let (id, _) = match admin.console.sessions.start(name) {
        Ok(started) => started,
        Err(e) => return login_with(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    crate::log::line(format_args!(
        "idemkit console: {name:?} logged in from {peer}"
    ));
    let mut response = see_other("/console");
    if let Ok(cookie) = HeaderValue::from_str(&session::set_cookie(&id, over_tls.is_some())) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn logout(
    State(admin): State<Arc<Admin>>,
    over_tls: Option<Extension<OverTls>>,
    headers: HeaderMap,
) -> Response<Body> {
    if let Err((status, why)) = changer(&admin, &headers) {
        return api_error(status, why);
    }
    admin.console.sessions.end(&headers);
    let mut response = with_type(StatusCode::NO_CONTENT, "text/plain; charset=utf-8", "");
    if let Ok(cookie) = HeaderValue::from_str(&session::clear_cookie(over_tls.is_some())) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// The page, for a session; anyone else is sent to the login page.
async fn app(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> Response<Body> {
    let Some(session) = admin.console.sessions.of(&headers) else {
        return see_other("/console/login");
    };
    let page = INDEX_HTML
        .replace("{{csrf}}", &escape_html(&session.csrf))
        .replace("{{operator}}", &escape_html(&session.operator));
    with_type(StatusCode::OK, "text/html; charset=utf-8", page)
}

/// The login page's stylesheet: public, it holds nothing but style.
async fn stylesheet() -> Response<Body> {
    with_type(StatusCode::OK, "text/css; charset=utf-8", CONSOLE_CSS)
}

async fn script(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> Response<Body> {
    if caller(&admin, &headers).is_none() {
        return api_error(StatusCode::UNAUTHORIZED, "admin token or session required");
    }
    with_type(StatusCode::OK, "text/javascript; charset=utf-8", CONSOLE_JS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn an_origin_must_name_this_host_when_a_browser_sends_one() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:9")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:9"),
            ("origin", "http://127.0.0.1:9")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:9"),
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:9"),
            ("origin", "null")
        ])));
    }

    #[test]
    fn html_escaping_covers_element_and_attribute_text() {
        assert_eq!(
            escape_html(r#"<a href="x" title='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
    }
}
