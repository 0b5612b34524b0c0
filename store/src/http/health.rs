//! A health endpoint that tells the truth about the store: 200 while it can
//! write, 503 with the reason while it cannot.
//!
//! ```
//! use axum::{Router, routing::get};
//! use idemkit::store::Store;
//!
//! let store = idemkit::in_memory().unwrap();
//! let app: Router = Router::new().route(
//!     "/health",
//!     get(move || idemkit::http::health_response(store.clone(), None)),
//! );
//! # let _ = app;
//! ```

use std::sync::Arc;

use ::http::{HeaderValue, Response, StatusCode, header};
use axum::body::Body;

use super::Metrics;
use super::store_calls::on_store;
use crate::store::{Health, Store};

/// Asks `store` whether it can write ([`Store::health`], on a blocking thread
/// when its adapter may block) and answers as a health endpoint should: `200`
/// with `{"status":"ok","writable":true,…}`, or `503` with `Retry-After: 1` and
/// `{"status":"unavailable","writable":false,"reason":…,"since_ms":…,
/// "last_writable_ms":…}` while the store cannot write (a load balancer then
/// stops sending it new requests, which would all be answered 503). Both say
/// how waits on a running key end (`"wakeups"`, [`crate::store::Wakeups`]).
/// Sets `idemkit_store_writable` in `metrics` if given.
pub async fn health_response(store: Store, metrics: Option<Arc<Metrics>>) -> Response<Body> {
    let checked = on_store(&store, {
        let store = store.clone();
        move || store.health()
    })
    .await;
    let health = checked.unwrap_or_else(|| {
        Health::unwritable("the health check itself failed (a panic in the adapter)")
    });
    if let Some(metrics) = &metrics {
        metrics.store_health(&health);
    }
    let mut response = Response::new(Body::from(health.to_json()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if !health.is_writable() {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}
