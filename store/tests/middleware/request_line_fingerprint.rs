//! What a key means includes the request line (docs/architecture.md, "Fingerprints"), through
//! a real axum server on a TCP socket and a raw HTTP/1.1 client:
//!
//! - one key and one body sent to `POST /accounts/A/withdraw` and then to
//!   `POST /accounts/B/withdraw` is two operations: the second gets 422 and B's
//!   handler never runs (under scheme 1 it replayed A's answer and B's withdrawal
//!   silently never happened);
//! - another query or another method with the same key is refused the same way;
//!   the query's pairs are compared decoded and sorted by name;
//! - a route may leave named query parameters or the whole query out;
//! - behind `Router::nest` the path the client sent counts, not the stripped one;
//! - a record written before the upgrade (scheme 1: operation and body only)
//!   keeps replaying, and a changed body still gets 422.
//!
//! Every test counts the handler's executions per account.
#![cfg(feature = "axum")]

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use idemkit::core::fingerprint::SCHEME_REQUEST_LINE;
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::core::{ContentKind, FingerprintSpec};
use idemkit::http::{IdempotencyLayer, RouteConfig};
use idemkit::store::{Claim, Store};
use idemkit::{IdempotencyKey, Scope};
use support::{Reply, request};

const OP: &str = "accounts.withdraw";
const BODY: &[u8] = br#"{"amount":10}"#;

/// Withdrawals per account, as the handler saw them.
type Ledger = Arc<Mutex<BTreeMap<String, usize>>>;

async fn withdraw(
    State(ledger): State<Ledger>,
    Path(params): Path<BTreeMap<String, String>>,
) -> String {
    let account = params["account"].clone();
    let mut ledger = ledger.lock().unwrap();
    let count = ledger.entry(account.clone()).or_default();
    *count += 1;
    format!("{{\"account\":\"{account}\",\"withdrawal\":{count}}}")
}

struct Server {
    addr: SocketAddr,
    ledger: Ledger,
    store: Store,
}

impl Server {
    fn withdrawals(&self, account: &str) -> usize {
        self.ledger
            .lock()
            .unwrap()
            .get(account)
            .copied()
            .unwrap_or(0)
    }

    async fn send(&self, method: &str, target: &str, key: &str, body: &[u8]) -> Reply {
        let (addr, method, target, key, body) = (
            self.addr,
            method.to_owned(),
            target.to_owned(),
            key.to_owned(),
            body.to_vec(),
        );
        tokio::task::spawn_blocking(move || {
            let headers: [(&str, &[u8]); 2] = [
                ("Content-Type", b"application/json"),
                ("Idempotency-Key", key.as_bytes()),
            ];
            request(addr, &method, &target, &headers, &body).unwrap()
        })
        .await
        .unwrap()
    }
}

/// `/accounts/{account}/withdraw` (POST and PUT) behind the layer; with `nested`
/// the route lives in a router nested under `/tenants/{tenant}`.
async fn serve(spec: FingerprintSpec, nested: bool, store: Store) -> Server {
    let ledger = Ledger::default();
    let route = RouteConfig::new(OP, EffectKind::Local)
        .fingerprint(spec)
        .principal(|_| Some("acme".to_owned()));
    let layer = IdempotencyLayer::new(store.clone(), route);
    let accounts = Router::new()
        .route(
            "/accounts/{account}/withdraw",
            post(withdraw).put(withdraw).route_layer(layer),
        )
        .with_state(Arc::clone(&ledger));
    let app = if nested {
        Router::new().nest("/tenants/{tenant}", accounts)
    } else {
        accounts
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        addr,
        ledger,
        store,
    }
}

fn json_spec() -> FingerprintSpec {
    FingerprintSpec::new(ContentKind::Json)
}

fn assert_reused(reply: &Reply) {
    assert_eq!(
        reply.status,
        422,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.problem(), "idempotency-key-reused");
}

fn assert_replayed(reply: &Reply, body: &str) {
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.header("idempotent-replayed"), Some("true"));
    assert_eq!(String::from_utf8_lossy(&reply.body), body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawing_from_b_with_the_key_and_body_used_for_a_is_refused_and_b_never_runs() {
    let server = serve(json_spec(), false, idemkit::in_memory().unwrap()).await;
    let first = server
        .send("POST", "/accounts/A/withdraw", "k-1", BODY)
        .await;
    assert_eq!(first.status, 200);
    let other = server
        .send("POST", "/accounts/B/withdraw", "k-1", BODY)
        .await;
    assert_reused(&other);
    assert_eq!(server.withdrawals("A"), 1);
    assert_eq!(
        server.withdrawals("B"),
        0,
        "B's withdrawal is refused, never answered with A's"
    );
    // A's retry still replays A's answer.
    let retry = server
        .send("POST", "/accounts/A/withdraw", "k-1", BODY)
        .await;
    assert_replayed(&retry, r#"{"account":"A","withdrawal":1}"#);
    assert_eq!(server.withdrawals("A"), 1);
    let record = server
        .store
        .get(
            &Scope::new("acme", OP).unwrap(),
            &IdempotencyKey::new("k-1").unwrap(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(record.fingerprint_scheme, SCHEME_REQUEST_LINE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_query_or_method_with_the_same_key_is_refused_and_a_reordered_query_replays() {
    let server = serve(json_spec(), false, idemkit::in_memory().unwrap()).await;
    let target = "/accounts/A/withdraw?currency=EUR&note=a+b&tag=1&tag=2";
    assert_eq!(server.send("POST", target, "k-1", BODY).await.status, 200);
    for (method, other) in [
        (
            "POST",
            "/accounts/A/withdraw?currency=USD&note=a+b&tag=1&tag=2",
        ),
        (
            "POST",
            "/accounts/A/withdraw?currency=EUR&note=a+b&tag=2&tag=1",
        ),
        ("POST", "/accounts/A/withdraw?currency=EUR&note=a+b"),
        ("POST", "/accounts/A/withdraw"),
        ("PUT", target),
    ] {
        let reply = server.send(method, other, "k-1", BODY).await;
        assert_reused(&reply);
    }
    // The same pairs in another order and spelling are the same query.
    let respelled = server
        .send(
            "POST",
            "/accounts/A/withdraw?tag=1&note=a%20b&tag=2&currency=EUR",
            "k-1",
            BODY,
        )
        .await;
    assert_replayed(&respelled, r#"{"account":"A","withdrawal":1}"#);
    assert_eq!(server.withdrawals("A"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_leaves_named_query_parameters_or_the_whole_query_out() {
    let named = serve(
        json_spec().ignore_query_param("utm_source"),
        false,
        idemkit::in_memory().unwrap(),
    )
    .await;
    let first = "/accounts/A/withdraw?utm_source=mail&currency=EUR";
    assert_eq!(named.send("POST", first, "k-1", BODY).await.status, 200);
    let tracked_elsewhere = named
        .send(
            "POST",
            "/accounts/A/withdraw?currency=EUR&utm_source=ad",
            "k-1",
            BODY,
        )
        .await;
    assert_replayed(&tracked_elsewhere, r#"{"account":"A","withdrawal":1}"#);
    let other_currency = named
        .send("POST", "/accounts/A/withdraw?currency=USD", "k-1", BODY)
        .await;
    assert_reused(&other_currency);
    assert_eq!(named.withdrawals("A"), 1);

    let whole = serve(
        json_spec().ignore_query(),
        false,
        idemkit::in_memory().unwrap(),
    )
    .await;
    assert_eq!(
        whole
            .send("POST", "/accounts/A/withdraw?x=1", "k-1", BODY)
            .await
            .status,
        200
    );
    let any_query = whole
        .send("POST", "/accounts/A/withdraw?y=%zz", "k-1", BODY)
        .await;
    assert_replayed(&any_query, r#"{"account":"A","withdrawal":1}"#);
    let other_path = whole
        .send("POST", "/accounts/B/withdraw?x=1", "k-1", BODY)
        .await;
    assert_reused(&other_path);
    assert_eq!((whole.withdrawals("A"), whole.withdrawals("B")), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_nested_router_the_path_the_client_sent_counts() {
    // The nested router strips `/tenants/{tenant}` before the layer sees the
    // request; both requests below look like `/accounts/A/withdraw` there.
    let server = serve(json_spec(), true, idemkit::in_memory().unwrap()).await;
    let first = server
        .send("POST", "/tenants/t1/accounts/A/withdraw", "k-1", BODY)
        .await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let other_tenant_path = server
        .send("POST", "/tenants/t2/accounts/A/withdraw", "k-1", BODY)
        .await;
    assert_reused(&other_tenant_path);
    assert_eq!(server.withdrawals("A"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_written_before_the_request_line_counted_keeps_replaying() {
    // What the middleware wrote before the upgrade: a scheme-1 fingerprint of the
    // operation and body, completed with the handler's answer.
    let store = idemkit::in_memory().unwrap();
    let scope = Scope::new("acme", OP).unwrap();
    let key = IdempotencyKey::new("k-old").unwrap();
    let scheme_1 = json_spec().fingerprint(OP, BODY).unwrap();
    let Claim::Execute(guard) = store
        .claim(
            &scope,
            &key,
            scheme_1,
            "before-upgrade",
            &Policy::default().with_effect(EffectKind::Local),
        )
        .unwrap()
    else {
        panic!("a fresh key executes")
    };
    guard
        .complete(StoredResponse {
            status: 200,
            headers: vec![("content-type".into(), b"text/plain".to_vec())],
            body: Some(br#"{"account":"A","withdrawal":0}"#.to_vec()),
            resource_ref: None,
        })
        .unwrap();
    assert_eq!(
        store.get(&scope, &key).unwrap().unwrap().fingerprint_scheme,
        1
    );

    let server = serve(json_spec(), false, store).await;
    let retry = server
        .send(
            "POST",
            "/accounts/A/withdraw",
            "k-old",
            br#"{ "amount": 10 }"#,
        )
        .await;
    assert_replayed(&retry, r#"{"account":"A","withdrawal":0}"#);
    let changed = server
        .send("POST", "/accounts/A/withdraw", "k-old", br#"{"amount":11}"#)
        .await;
    assert_reused(&changed);
    assert_eq!(
        server.withdrawals("A"),
        0,
        "the upgrade turned no retry into a new run"
    );
}
