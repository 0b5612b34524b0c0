//! **What not to do**: the idempotency most APIs write by hand, for `idemkit probe`
//! to fail (docs/probe.md, store/tests/cli/probe.rs).
//!
//! `POST /charges` looks the `Idempotency-Key` header up in a map; on a miss it
//! does the work (100 ms) and stores the answer afterwards. A sequential retry
//! replays, so it looks right — but nothing holds the key while the work runs
//! (simultaneous retries all charge), the payload is never compared (a changed
//! request silently gets the first answer), and the key is not scoped to the
//! caller (another tenant's request with the same key gets this one's answer).
//!
//! ```text
//! cargo run -p idemkit --example naive_idempotency -- --listen 127.0.0.1:8090
//! idemkit probe http://127.0.0.1:8090/charges -d '{"amount":1200}' \
//!   -H 'Authorization: Bearer a' --other-tenant-header 'Authorization: Bearer b'
//! ```
//!
//! `GET /charges` answers how many charges ran; `GET /health` answers 200.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};

#[derive(Default)]
struct Naive {
    answers: Mutex<HashMap<String, String>>,
    charges: AtomicUsize,
}

async fn charge(State(naive): State<Arc<Naive>>, headers: HeaderMap) -> (StatusCode, String) {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Check...
    if let Some(answer) = key
        .as_ref()
        .and_then(|k| naive.answers.lock().ok()?.get(k).cloned())
    {
        return (StatusCode::CREATED, answer);
    }
    // ...then act, with nothing holding the key meanwhile.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let n = naive.charges.fetch_add(1, Ordering::SeqCst) + 1;
    let answer = format!(r#"{{"id":"ch_{n}"}}"#);
    if let (Some(key), Ok(mut answers)) = (key, naive.answers.lock()) {
        answers.insert(key, answer.clone());
    }
    (StatusCode::CREATED, answer)
}

async fn charges(State(naive): State<Arc<Naive>>) -> String {
    naive.charges.load(Ordering::SeqCst).to_string()
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut listen = "127.0.0.1:8090".to_owned();
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr,
            _ => {
                eprintln!("usage: naive_idempotency [--listen ADDR]");
                std::process::exit(64);
            }
        }
    }
    let naive = Arc::new(Naive::default());
    let app = Router::new()
        .route("/charges", post(charge).get(charges))
        .route("/health", get(|| async { "ok" }))
        .with_state(naive);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!(
        "naive (wrong) idempotency on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, app).await
}
