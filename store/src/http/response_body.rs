//! A response too large to hold whole: streamed to the client as it arrives,
//! its stored copy captured up to the route's bound, and its last bytes held
//! back until the outcome is recorded, so a client that has the whole response
//! knows it is durable (nothing is acknowledged before it is).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::http::Response;
use ::http::response::Parts as ResponseParts;
use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body::Frame;
use http_body_util::BodyExt;
use idemkit_core::machine::Disposition;
use idemkit_core::record::StoredResponse;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::catch_unwind::CatchUnwind;
use super::recording::{record, settle_unrecorded};
use super::{BoxError, Execution, OnDisconnect, RouteConfig};

/// Bytes of a response read before the layer streams it instead of holding it
/// whole. A response that ends within them is recorded before its head is
/// sent, as every handler's answer is; a longer one is streamed.
pub(crate) const STREAM_AFTER: usize = 64 * 1024;

/// How a response body began.
pub(crate) enum Start<B> {
    /// The whole body: it ended within [`STREAM_AFTER`] bytes.
    Whole(Bytes),
    /// The first bytes, and the rest of the body still to come.
    Open { seen: Bytes, rest: Pin<Box<B>> },
    /// The body failed before it ended.
    Failed,
}

/// Reads `body` until it ends or [`STREAM_AFTER`] bytes have come.
pub(crate) async fn read_start<B>(body: B) -> Start<B>
where
    B: http_body::Body<Data = Bytes>,
{
    let mut body = Box::pin(body);
    let mut seen = Seen::default();
    loop {
        match body.frame().await {
            None => return Start::Whole(seen.into_bytes()),
            Some(Err(_)) => return Start::Failed,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    seen.push(data);
                }
            }
        }
        if body.is_end_stream() {
            return Start::Whole(seen.into_bytes());
        }
        if seen.len() >= STREAM_AFTER {
            return Start::Open {
                seen: seen.into_bytes(),
                rest: body,
            };
        }
    }
}

/// The bytes read so far; one chunk (the common case) is kept without a copy.
#[derive(Default)]
struct Seen {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Seen {
    fn push(&mut self, data: Bytes) {
        if let Some(more) = &mut self.more {
            more.extend_from_slice(&data);
        } else if self.first.is_empty() {
            self.first = data;
        } else {
            let mut more = BytesMut::with_capacity(self.first.len() + data.len());
            more.extend_from_slice(&self.first);
            more.extend_from_slice(&data);
            self.more = Some(more);
        }
    }

    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn into_bytes(self) -> Bytes {
        self.more.map_or(self.first, BytesMut::freeze)
    }
}

/// What goes to the client's side of a streamed response.
enum Piece {
    Data(Bytes),
    /// The outcome is recorded and every byte was sent: the response may end.
    End,
}

/// The client's side of a streamed response. It ends only after [`Piece::End`];
/// a sender gone without it (the source failed, the outcome could not be
/// recorded) is an error, so the client sees a broken response, never a whole
/// one that was not recorded.
struct Delivered {
    pieces: mpsc::Receiver<Piece>,
    ended: bool,
}

impl http_body::Body for Delivered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.pieces.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Piece::Data(data))) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Poll::Ready(Some(Piece::End)) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(Some(Err(
                    "the response was cut off: its source failed or its outcome was not recorded"
                        .into(),
                )))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// An execution whose response is being streamed, and what recording it takes.
pub(crate) struct Streaming {
    pub(crate) execution: Execution,
    pub(crate) config: Arc<RouteConfig>,
    /// The response to store, without its body (captured while streaming).
    pub(crate) stored: StoredResponse,
    pub(crate) disposition: Disposition,
    /// Held until the outcome is recorded: the lease renewal and the entry in
    /// the route's running executions.
    pub(crate) hold: Box<dyn Send>,
}

impl Streaming {
    /// Answers `head` at once and streams `seen`, then `rest`, to the client on
    /// a task of its own, recording the outcome before the last bytes go out.
    pub(crate) fn respond<B>(
        self,
        head: ResponseParts,
        seen: Bytes,
        rest: Pin<Box<B>>,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        // Two pieces in flight: the source waits for a slow client instead of
        // piling up its bytes here.
        let (client, pieces) = mpsc::channel(2);
        let span = self.execution.span().clone();
        tokio::spawn(self.run(seen, rest, client).instrument(span));
        Response::from_parts(
            head,
            Body::new(Delivered {
                pieces,
                ended: false,
            }),
        )
    }

    async fn run<B>(mut self, seen: Bytes, mut rest: Pin<Box<B>>, client: mpsc::Sender<Piece>)
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let bound = self.config.max_stored_response_bytes;
        let mut captured = (seen.len() <= bound).then(|| seen.to_vec());
        let mut client = Some(client);
        // The latest bytes wait here until the next arrive, or the outcome is
        // recorded if they were the last.
        let mut pending = seen;
        loop {
            // Read into a plain value first: the body's error need not be Send.
            let next = match CatchUnwind(Box::pin(rest.frame())).await {
                Ok(None) => Next::End,
                Ok(Some(Ok(frame))) => frame.into_data().map_or(Next::Other, Next::Data),
                Ok(Some(Err(_))) | Err(_) => Next::Failed,
            };
            let data = match next {
                Next::Data(data) => data,
                // Trailers are not forwarded (nor stored).
                Next::Other => continue,
                Next::End => break,
                Next::Failed => {
                    tracing::warn!(
                        "the response body failed while streaming; settling the attempt"
                    );
                    settle_unrecorded(&self.execution).await;
                    return;
                }
            };
            if data.is_empty() {
                continue;
            }
            if let Some(kept) = &mut captured {
                if kept.len() + data.len() <= bound {
                    kept.extend_from_slice(&data);
                } else {
                    // Over the bound: completed without its body, as a whole
                    // response over it is (a retry gets 410).
                    captured = None;
                }
            }
            let earlier = std::mem::replace(&mut pending, data);
            if !deliver(&mut client, Piece::Data(earlier)).await
                && self.config.on_disconnect == OnDisconnect::Cancel
            {
                drop(rest);
                tracing::warn!("the client left while the response streamed; settling the attempt");
                settle_unrecorded(&self.execution).await;
                return;
            }
        }
        self.stored.body = captured;
        let Some(guard) = self.execution.take_guard() else {
            return;
        };
        // Durable: the last bytes, then the end. Not durable: the client's
        // response is cut off (the sender dropped), never finished.
        if record(guard, self.disposition, self.stored, &self.config).await
            && deliver(&mut client, Piece::Data(pending)).await
        {
            deliver(&mut client, Piece::End).await;
        }
        drop(self.hold);
    }
}

/// The next frame of a streamed body.
enum Next {
    Data(Bytes),
    Other,
    End,
    Failed,
}

/// Sends `piece` to the client; false once the client is gone.
async fn deliver(client: &mut Option<mpsc::Sender<Piece>>, piece: Piece) -> bool {
    let Some(sender) = client else {
        return false;
    };
    if sender.send(piece).await.is_err() {
        *client = None;
        return false;
    }
    true
}
