//! Bounds on what a client or the upstream can make the proxy hold: time
//! between two chunks of a body, either way, and the number of open client
//! connections.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::Request;
use http_body::{Frame, SizeHint};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body sent nothing for too long.
#[derive(Debug)]
struct IdleTimeout {
    idle: Duration,
}

impl fmt::Display for IdleTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the body sent nothing for {} ms (its idle timeout)",
            self.idle.as_millis()
        )
    }
}

impl std::error::Error for IdleTimeout {}

/// The idle timeout of one body: armed when the body first has nothing to
/// give after some progress, so a body that is always ready never touches
/// the timer wheel.
struct IdleTimer {
    idle: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
}

impl IdleTimer {
    fn new(idle: Duration) -> IdleTimer {
        IdleTimer {
            idle,
            sleep: None,
            armed: false,
        }
    }

    /// Called when the body is pending: ready with the error once the body
    /// has been idle for the whole timeout.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<IdleTimeout> {
        let deadline = tokio::time::Instant::now() + self.idle;
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if !self.armed {
                    sleep.as_mut().reset(deadline);
                }
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.armed = true;
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(IdleTimeout { idle: self.idle }),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The body gave a frame (or ended): the next wait starts afresh.
    fn progressed(&mut self) {
        self.armed = false;
    }
}

/// A body that fails when its source sends nothing for longer than the idle
/// timeout between two chunks (a client's request body, the upstream's answer).
pub(crate) struct Idle<B> {
    inner: B,
    timer: IdleTimer,
}

impl<B> Idle<B> {
    pub(crate) fn new(inner: B, idle: Duration) -> Idle<B> {
        Idle {
            inner,
            timer: IdleTimer::new(idle),
        }
    }
}

impl<B> http_body::Body for Idle<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => match self.timer.poll_expired(cx) {
                Poll::Ready(error) => Poll::Ready(Some(Err(error.into()))),
                Poll::Pending => Poll::Pending,
            },
            Poll::Ready(frame) => {
                self.timer.progressed();
                Poll::Ready(frame.map(|result| result.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `request` whose body (if it has one) fails after `idle` without data.
pub(crate) fn with_body_idle_timeout(request: Request<Body>, idle: Duration) -> Request<Body> {
    if http_body::Body::is_end_stream(request.body()) {
        return request;
    }
    request.map(|inner| Body::new(Idle::new(inner, idle)))
}

/// The open client connections, against their cap.
#[derive(Debug)]
pub(crate) struct Connections {
    open: AtomicUsize,
    max: usize,
}

impl Connections {
    pub(crate) fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            open: AtomicUsize::new(0),
            max,
        })
    }

    /// Counts a new connection until the slot is dropped.
    pub(crate) fn open(self: &Arc<Self>) -> Slot {
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        Slot {
            connections: Arc::clone(self),
            within_cap: open <= self.max,
        }
    }
}

/// One open connection.
#[derive(Debug)]
pub(crate) struct Slot {
    connections: Arc<Connections>,
    /// Whether this connection is within the cap (else it gets 503 and closes).
    pub(crate) within_cap: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.open.fetch_sub(1, Ordering::Relaxed);
    }
}
