//! A Local route whose handler commits its write and the outcome in one
//! transaction through the execution it receives (`Execution::complete_with`,
//! `idemkit::local`), through an axum `Router` with the layer on the route:
//!
//! - the layer answers the stored response (not the handler's own return), a
//!   retry replays the same bytes, and the note is written once;
//! - a handler whose writes fail gets the error, nothing is committed, and its
//!   own 500 is recorded as usual (a Local 5xx releases: the retry runs again);
//! - a handler that fails after completing still answers the stored response;
//! - a second `complete_with` is refused;
//! - a body over the route's stored-response bound is answered once and not
//!   kept: the retry gets 410 with the resource reference, never a second note.
#![cfg(feature = "axum")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::Extension;
use axum::response::IntoResponse;
use axum::routing::post;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::http::{Execution, IdempotencyLayer, RouteConfig};
use idemkit::local::LocalError;
use idemkit::store::Store;
use redb::{ReadableTableMetadata, TableDefinition};
use tower::ServiceExt;

const NOTES: TableDefinition<&str, &str> = TableDefinition::new("service.notes");

fn route() -> RouteConfig {
    RouteConfig::new("notes.create", EffectKind::Local).principal(|_| Some("t".into()))
}

fn app(store: &Store, handler: axum::routing::MethodRouter) -> Router {
    app_on(store, route(), handler)
}

fn app_on(store: &Store, route: RouteConfig, handler: axum::routing::MethodRouter) -> Router {
    Router::new().route(
        "/notes",
        handler.route_layer(IdempotencyLayer::new(store.clone(), route)),
    )
}

/// The app over `handler`, which gets the attempt number (0 first); and how
/// many times it ran.
fn counting_app<F, Fut>(store: &Store, handler: F) -> (Router, Arc<AtomicUsize>)
where
    F: Fn(Execution, usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output: IntoResponse> + Send + 'static,
{
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let app = app(
        store,
        post(move |Extension(exec): Extension<Execution>| {
            handler(exec, counted.fetch_add(1, Ordering::SeqCst))
        }),
    );
    (app, runs)
}

struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn send(app: &Router, key: &str) -> Got {
    let request = Request::post("/notes")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(r#"{"text":"hello"}"#))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

fn note_count(store: &Store) -> u64 {
    store
        .read_local(|txn| match txn.open_table(NOTES) {
            Ok(table) => table.len().unwrap(),
            Err(redb::TableError::TableDoesNotExist(_)) => 0,
            Err(e) => panic!("{e}"),
        })
        .unwrap()
}

fn created() -> StoredResponse {
    let mut response = StoredResponse::new(201, br#"{"id":"note_1","text":"hello"}"#.to_vec());
    response
        .headers
        .push(("content-type".into(), b"application/json".to_vec()));
    response
}

async fn write_note(exec: &Execution) -> Result<(), LocalError<redb::Error>> {
    write_note_answering(exec, created()).await
}

/// Writes the note and completes the record with `response`, in one transaction.
async fn write_note_answering(
    exec: &Execution,
    response: StoredResponse,
) -> Result<(), LocalError<redb::Error>> {
    exec.complete_with(
        |txn| -> Result<(), redb::Error> {
            txn.open_table(NOTES)?.insert("note_1", "hello")?;
            Ok(())
        },
        response,
    )
    .await
}

#[tokio::test]
async fn the_layer_answers_and_replays_what_the_handler_committed() {
    let store = idemkit::in_memory().unwrap();
    let (app, runs) = counting_app(&store, |exec, _| async move {
        write_note(&exec).await.unwrap();
        // What the handler returns after completing is not the answer.
        (StatusCode::OK, "ignored")
    });
    let first = send(&app, "k1").await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body, br#"{"id":"note_1","text":"hello"}"#);
    assert_eq!(first.headers["content-type"], "application/json");
    assert!(first.headers.get("idempotent-replayed").is_none());
    let retry = send(&app, "k1").await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.body, first.body);
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(note_count(&store), 1);
}

#[tokio::test]
async fn failing_writes_commit_nothing_and_the_handlers_500_releases() {
    let store = idemkit::in_memory().unwrap();
    let (app, runs) = counting_app(&store, |exec, attempt| async move {
        let written = exec
            .complete_with(
                move |txn| -> Result<(), String> {
                    txn.open_table(NOTES)
                        .map_err(|e| e.to_string())?
                        .insert("note_1", "hello")
                        .map_err(|e| e.to_string())?;
                    if attempt == 0 {
                        return Err("the first attempt's writes fail".into());
                    }
                    Ok(())
                },
                created(),
            )
            .await;
        match written {
            Ok(()) => (StatusCode::OK, String::new()),
            Err(LocalError::Writes(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e),
            Err(other) => panic!("expected the writes' error, got {other:?}"),
        }
    });
    let first = send(&app, "k1").await;
    assert_eq!(first.status, 500);
    assert_eq!(first.body, b"the first attempt's writes fail");
    assert_eq!(note_count(&store), 0, "nothing committed");
    // A Local 500 released the record: the retry runs and commits once.
    let retry = send(&app, "k1").await;
    assert_eq!(retry.status, 201);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(note_count(&store), 1);
}

#[tokio::test]
async fn a_handler_failing_after_its_completion_still_answers_the_stored_response() {
    let store = idemkit::in_memory().unwrap();
    let app = app(
        &store,
        post(|Extension(exec): Extension<Execution>| async move {
            write_note(&exec).await.unwrap();
            // A second completion is refused: the outcome is recorded.
            assert!(matches!(
                write_note(&exec).await,
                Err(LocalError::AlreadyRecorded)
            ));
            panic!("the handler's bug after its commit");
            #[allow(unreachable_code)]
            ()
        }),
    );
    let first = send(&app, "k1").await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body, br#"{"id":"note_1","text":"hello"}"#);
    assert_eq!(send(&app, "k1").await.status, 201);
    assert_eq!(note_count(&store), 1);
}

#[tokio::test]
async fn a_body_over_the_stored_bound_is_answered_once_and_the_retry_gets_410() {
    let store = idemkit::in_memory().unwrap();
    let app = app_on(
        &store,
        route().max_stored_response_bytes(8),
        post(|Extension(exec): Extension<Execution>| async move {
            let mut response = created();
            response.resource_ref = Some("note_1".into());
            write_note_answering(&exec, response).await.unwrap();
        }),
    );
    let first = send(&app, "k1").await;
    assert_eq!(first.status, 201);
    assert_eq!(
        first.body, br#"{"id":"note_1","text":"hello"}"#,
        "answered whole once"
    );
    let retry = send(&app, "k1").await;
    assert_eq!(
        retry.status,
        410,
        "{}",
        String::from_utf8_lossy(&retry.body)
    );
    assert!(String::from_utf8_lossy(&retry.body).contains("note_1"));
    assert_eq!(note_count(&store), 1);
}

/// A Local completion stored every header the handler put in its response,
/// `Set-Cookie` included, and replayed it to whoever retried with the key. It
/// keeps only the route's replayed headers (content type, location, … by
/// default): the session cookie and the custom session token are neither
/// stored nor answered, the first time or on a retry.
#[tokio::test]
async fn a_local_completion_keeps_only_the_replayed_headers() {
    let store = idemkit::in_memory().unwrap();
    let app = app(
        &store,
        post(|Extension(exec): Extension<Execution>| async move {
            let mut response = created();
            for (name, value) in [
                ("location", "/notes/note_1"),
                ("set-cookie", "session=s3cret"),
                ("x-session-token", "tok-s3cret"),
            ] {
                response.headers.push((name.into(), value.into()));
            }
            write_note_answering(&exec, response).await.unwrap();
        }),
    );
    let first = send(&app, "k1").await;
    let retry = send(&app, "k1").await;
    assert_eq!((first.status, retry.status), (201, 201));
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    for got in [&first, &retry] {
        assert_eq!(got.headers["content-type"], "application/json");
        assert_eq!(got.headers["location"], "/notes/note_1");
        assert!(got.headers.get("set-cookie").is_none(), "{:?}", got.headers);
        assert!(
            got.headers.get("x-session-token").is_none(),
            "{:?}",
            got.headers
        );
    }
    let record = store
        .get(
            &idemkit::Scope::new("t", "notes.create").unwrap(),
            &idemkit::IdempotencyKey::new("k1").unwrap(),
        )
        .unwrap()
        .unwrap();
    let idemkit::core::record::RecordState::Completed { response, .. } = &record.state else {
        panic!("not completed: {:?}", record.state);
    };
    let mut stored: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
    stored.sort_unstable();
    assert_eq!(stored, ["content-type", "location"]);
}
