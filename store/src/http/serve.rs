//! An HTTP/1 server for a tower service or an axum router, with a deadline for
//! every request head and a graceful stop: what `idemkit proxy`, `idemkit mcp`
//! and the appointments reference service listen with.
//!
//! `axum::serve` installs no timer in hyper, which leaves hyper's header-read
//! timeout inert: a client that opens a connection and sends its head a byte at
//! a time, or never, or keeps an idle connection alive, holds that connection
//! (a task and a file descriptor) for as long as it likes. Here each connection
//! gets a timer, so a head not complete within the deadline closes the
//! connection.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//!
//! # async fn run() -> std::io::Result<()> {
//! let app: Router = Router::new().route("/health", get(|| async { "ok" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // `stop.send(())` (or dropping `stop`) ends the accept loop; the open
//! // connections then finish their answers.
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! # drop(stop);
//! let timeout = idemkit::http::DEFAULT_HEADER_READ_TIMEOUT;
//! idemkit::http::serve_router(listener, timeout, app, async {
//!     let _ = stopped.await;
//! })
//! .await;
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::{Service, ServiceExt as _};

/// How long a client may take to send a request's head (its request line and
/// headers) unless the configuration says otherwise: the first from the
/// connection's start, each later one from the end of the exchange before it
/// (hyper's timer, so an idle keep-alive connection is closed as well).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `listener` until `stop` completes, then lets the open connections
/// finish what they are answering and returns. `service` makes one connection's
/// service from the client's address; small answers go out at once (no Nagle
/// delay behind the client's ACK). A client gets `header_read_timeout` for each
/// request head: the first from the connection's start, each later one from the
/// end of the exchange before it.
pub async fn serve<S>(
    listener: TcpListener,
    header_read_timeout: Duration,
    mut service: impl FnMut(SocketAddr) -> S + Send,
    stop: impl Future<Output = ()> + Send,
) where
    S: Service<http::Request<Body>, Response = axum::response::Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut stop = std::pin::pin!(stop);
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => Some(accepted),
            () = &mut stop => None,
        };
        let Some(accepted) = accepted else {
            break;
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: pause instead of
                // spinning (what `axum::serve` does too).
                if !is_connection_error(&e) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let service =
            service(peer).map_request(|request: http::Request<Incoming>| request.map(Body::new));
        let connection =
            builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Errors of one connection (the client gave up before it was accepted), not
/// of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// [`serve`] for an axum router. Its handlers may ask for the client's address
/// (`ConnectInfo<SocketAddr>`, as with `into_make_service_with_connect_info`).
pub async fn serve_router(
    listener: TcpListener,
    header_read_timeout: Duration,
    router: axum::Router,
    stop: impl Future<Output = ()> + Send,
) {
    let service = move |peer: SocketAddr| {
        router
            .clone()
            .map_request(move |mut request: http::Request<Body>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request
            })
    };
    serve(listener, header_read_timeout, service, stop).await;
}
