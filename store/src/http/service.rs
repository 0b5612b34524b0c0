//! The tower [`Layer`](tower::Layer) and the [`Service`](tower::Service) it builds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::http::{Request, Response};
use axum::body::Body;
use bytes::Bytes;
use idemkit_core::http::Refusal;

use super::pipeline::{Incoming, handle};
use super::response::refusal_response;
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
                // client disconnects, which ends a wait on the task.
                let (here, client_gone) = tokio::sync::oneshot::channel::<()>();
                let request = Incoming {
                    request,
                    entry,
                    client_gone: Some(client_gone),
                };
                let unavailable = Refusal::StoreUnavailable {
                    retry_after: config.store_retry_after,
                };
                // Dropping a JoinHandle detaches its task: the claim and the
                // execution outlive the request, so a claim is never left
                // unexecuted (which would read as an unknown outcome). Boxed
                // first: the request's future (its whole pipeline) is large,
                // and spawning copies an unboxed future at each move into the
                // task (callgrind: 5 % of a request's instructions).
                let task = tokio::spawn(Box::pin(handle(inner, store, config, request)));
                Box::pin(async move {
                    let _here = here;
                    match task.await {
                        Ok(result) => result,
                        Err(e) => match e.try_into_panic() {
                            // The same panic the handler raised, as if it had run inline.
                            Ok(payload) => std::panic::resume_unwind(payload),
                            // Cancelled only when the runtime shuts down; a guard
                            // dropped with it records Unknown or Released.
                            Err(_) => Ok(refusal_response(&unavailable)),
                        },
                    }
                })
            }
        }
    }
}
