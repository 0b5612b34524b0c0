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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
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
    service: impl FnMut(SocketAddr) -> S + Send,
    stop: impl Future<Output = ()> + Send,
) where
    S: Service<http::Request<Body>, Response = axum::response::Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let plain = |tcp| std::future::ready(Some(tcp));
    serve_upgraded(listener, header_read_timeout, service, plain, stop).await;
}

/// [`serve`] over what `upgrade` makes of each accepted connection, such as
/// a TLS stream after its handshake. `upgrade` runs in the connection's own
/// task, so a slow client holds up no other; it gets the same
/// `header_read_timeout` as a request head, and a connection it gives up on
/// (`None`), or that runs out of time, is closed. A stop ends the upgrades
/// under way (their connections close, as hyper closes one still waiting for
/// its request head) and waits for the open connections' answers.
pub async fn serve_upgraded<S, U, F, IO>(
    listener: TcpListener,
    header_read_timeout: Duration,
    mut service: impl FnMut(SocketAddr) -> S + Send,
    upgrade: U,
    stop: impl Future<Output = ()> + Send,
) where
    S: Service<http::Request<Body>, Response = axum::response::Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    U: Fn(TcpStream) -> F,
    F: Future<Output = Option<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let builder = http1_builder(header_read_timeout);
    // A stop ends the upgrades under way at once, as hyper closes a
    // connection that is still waiting for its request head.
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    accept_until(listener, stop, |tcp, peer| {
        let service =
            service(peer).map_request(|request: http::Request<Incoming>| request.map(Body::new));
        let upgrading = tokio::time::timeout(header_read_timeout, upgrade(tcp));
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let io = tokio::select! {
                upgraded = upgrading => match upgraded {
                    Ok(Some(io)) => io,
                    Ok(None) | Err(_) => return,
                },
                _ = stopped.wait_for(|stop| *stop) => return,
            };
            let connection =
                builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
            let _ = watcher.watch(connection).await;
        });
    })
    .await;
    let _ = stopping.send(true);
    graceful.shutdown().await;
}

/// hyper's HTTP/1 server settings: a timer, so that `header_read_timeout`
/// closes a connection whose request head does not arrive in time.
fn http1_builder(header_read_timeout: Duration) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder
}

/// Accepts connections on `listener` (Nagle off) and hands each to `accepted`
/// until `stop` completes; then closes the listener.
async fn accept_until(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send,
    mut accepted: impl FnMut(TcpStream, SocketAddr),
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        let next = tokio::select! {
            next = listener.accept() => Some(next),
            () = &mut stop => None,
        };
        let Some(next) = next else {
            break;
        };
        match next {
            Ok((tcp, peer)) => {
                let _ = tcp.set_nodelay(true);
                accepted(tcp, peer);
            }
            Err(e) => {
                // Out of file descriptors and the like: pause instead of
                // spinning (what `axum::serve` does too).
                if !is_connection_error(&e) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
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
    let service = move |peer| with_connect_info(router.clone(), peer);
    serve(listener, header_read_timeout, service, stop).await;
}

/// [`serve_upgraded`] for an axum router, which may ask for the client's
/// address as with [`serve_router`].
pub async fn serve_router_upgraded<U, F, IO>(
    listener: TcpListener,
    header_read_timeout: Duration,
    router: axum::Router,
    upgrade: U,
    stop: impl Future<Output = ()> + Send,
) where
    U: Fn(TcpStream) -> F,
    F: Future<Output = Option<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_upgraded(
        listener,
        header_read_timeout,
        move |peer| with_connect_info(router.clone(), peer),
        upgrade,
        stop,
    )
    .await;
}

/// The service of a connection from `peer`: `router`, with the client's
/// address in each request's extensions (`ConnectInfo<SocketAddr>`).
fn with_connect_info(
    router: axum::Router,
    peer: SocketAddr,
) -> impl Service<
    http::Request<Body>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    router.map_request(move |mut request: http::Request<Body>| {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        request
    })
}
