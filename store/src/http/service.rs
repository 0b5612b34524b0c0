//! The tower [`Layer`](tower::Layer) and the [`Service`](tower::Service) it builds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::http::{Request, Response};
use axum::body::Body;
use bytes::Bytes;

use super::catch_unwind::CatchUnwind;
use super::pipeline::{Incoming, handle};
use super::{BoxError, Executions, OnDisconnect, RouteConfig};
use crate::store::Store;

/// A tower [`Layer`](tower::Layer) that makes the wrapped service idempotent
/// per one [`RouteConfig`]. Cheap to clone.
///
/// **Timeout layers belong outside this layer.** A tower `TimeoutLayer` (or any
/// layer that answers for the handler: load shedding, rate limiting) placed
/// *inside* it answers 408/503 as if the handler had, while the handler's
/// downstream call may already be on its way; on an External route the record
/// then becomes Unknown and the key is stuck until an operator resolves it.
/// Placed *outside*, a timeout drops the request future: with
/// [`OnDisconnect::Finish`] the handler still runs to its end and is recorded,
/// and the client's retry gets 409 `request-in-progress`, then the replay.
/// Bound a slow handler with [`RouteConfig::max_execution`] instead.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer {
    store: Store,
    config: Arc<RouteConfig>,
}

impl IdempotencyLayer {
    /// A layer recording into `store` per `config`.
    #[must_use]
    pub fn new(store: Store, config: RouteConfig) -> Self {
        IdempotencyLayer {
            store,
            config: Arc::new(config),
        }
    }
}

impl<S> tower::Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            store: self.store.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

/// The service built by [`IdempotencyLayer`].
#[derive(Clone, Debug)]
pub struct Idempotency<S> {
    inner: S,
    store: Store,
    config: Arc<RouteConfig>,
}

impl<S, B, RB> tower::Service<Request<B>> for Idempotency<S>
where
    S: tower::Service<Request<Body>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited on a clone inside the call (`oneshot`), so a
        // request refused before execution never reserves the inner service.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let store = self.store.clone();
        let config = Arc::clone(&self.config);
        let entry = config.executions.as_ref().map(Executions::enter);
        match config.on_disconnect {
            OnDisconnect::Cancel => {
                let request = Incoming {
                    request,
                    entry,
                    client_gone: None,
                };
                Box::pin(handle(inner, store, config, request))
            }
            OnDisconnect::Finish => {
                // Held by the request's future: dropped with it when the
                // client disconnects, which ends a wait of the handling.
                let (here, client_gone) = tokio::sync::oneshot::channel::<()>();
                let request = Incoming {
                    request,
                    entry,
                    client_gone: Some(client_gone),
                };
                Box::pin(FinishOnDrop {
                    client: Some(here),
                    work: Some(CatchUnwind(Box::pin(handle(inner, store, config, request)))),
                })
            }
        }
    }
}

/// A request's handling under [`OnDisconnect::Finish`]: polled in the
/// request's own task while the client waits, and handed to a task of its own
/// only if the request's future is dropped before it ends (the client went
/// away, a timeout outside the layer), so the claim and the execution still
/// run to their end and are recorded: a claim is never left unexecuted, which
/// would read as an unknown outcome.
///
/// A claim answered without executing (a replay, a refusal) therefore costs
/// no task: spawning every request's handling cost a wake-up of another
/// thread and back per request, most of what the layer added to a replay. An
/// execution is spawned by the pipeline itself (`pipeline.rs` says why).
/// Boxed: the handling's future (the whole pipeline) is large, and a box
/// moves into a task without copying it.
struct FinishOnDrop<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    /// Dropped first when the request is: a wait of the handling then ends.
    client: Option<tokio::sync::oneshot::Sender<()>>,
    /// The handling; `None` once it ended (or panicked).
    work: Option<CatchUnwind<F>>,
}

impl<F: Future + Send + 'static> Future for FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let Some(work) = this.work.as_mut() else {
            // Polled after it answered: a caller's bug, never the pipeline's.
            return Poll::Pending;
        };
        let Poll::Ready(ended) = Pin::new(work).poll(cx) else {
            return Poll::Pending;
        };
        // Dropped here, as a task that ended or panicked is (a panicking
        // handling's guards settle the record); a panic goes on as if it had
        // run inline: the handler's own.
        this.work = None;
        Poll::Ready(ended.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    }
}

impl<F: Future + Send + 'static> Drop for FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        drop(self.client.take());
        if let Some(work) = self.work.take() {
            // Outside a tokio runtime nothing can run it: it is dropped, and
            // its guards record Unknown or release the claim.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(work));
            }
        }
    }
}
