//! Other instances' writes, announced: one thread per store that waits on a
//! `LISTEN` and tells the engine's waiters which record left Running.
//!
//! The writes announce themselves (`schema.rs`): `pg_notify(channel, id)` in
//! the statement that completes, releases, settles or deletes a record, so the
//! notification leaves with the commit and never before it. This side holds a
//! connection of its own (not the pool's: a `LISTEN` belongs to its session),
//! named `idemkit-listen` in `pg_stat_activity`, and
//!
//! - calls [`ChangeSink::channel`]`(true)` once its `LISTEN` is in place, and
//!   [`ChangeSink::changed`] with the id bytes of each notification;
//! - checks the connection after every [`CHECK_AFTER`] of quiet (an empty
//!   query, answered within the store's connect timeout), so a connection that
//!   died silently is noticed;
//! - on any error calls `channel(false)` (waiters then poll the record) and
//!   connects again after a pause that doubles from [`FIRST_PAUSE`] to
//!   [`LONGEST_PAUSE`] while connecting fails. Notifications sent while it was
//!   down are lost; `channel(true)` on the way back wakes every waiter to read
//!   its record again, so no completion is missed;
//! - holds the sink weakly and ends within [`TICK`] (or one pause) of the last
//!   handle on its store being dropped, closing its connection.

use std::sync::Weak;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::adapters::ChangeSink;

/// The `application_name` of the listening connection.
pub(crate) const APPLICATION_NAME: &str = "idemkit-listen";

/// How long one wait for a notification lasts before the thread looks whether
/// its store is still there.
pub(crate) const TICK: Duration = Duration::from_millis(500);

/// The connection is checked after this long without a notification.
pub(crate) const CHECK_AFTER: Duration = Duration::from_secs(5);

/// The first pause before connecting again.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two attempts to connect.
pub(crate) const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Where and what to listen to: the store's server (its URL's settings) and
/// its channel.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) config: postgres::Config,
    /// The pool's TLS (the URL's `sslmode`).
    pub(crate) tls: MakeRustlsConnect,
    pub(crate) channel: String,
    /// How long the quiet-time check may take.
    pub(crate) check_within: Duration,
}

impl Target {
    /// The listening connection's settings: the pool's, named
    /// [`APPLICATION_NAME`].
    pub(crate) fn new(
        mut config: postgres::Config,
        tls: MakeRustlsConnect,
        channel: String,
        check_within: Duration,
    ) -> Target {
        config.application_name(APPLICATION_NAME);
        Target {
            config,
            tls,
            channel,
            check_within,
        }
    }
}

/// Starts the listening thread for `sink`; returns at once. Without a thread
/// (the system refused one), the channel stays closed and waiters poll.
pub(crate) fn start(target: Target, sink: Weak<dyn ChangeSink>) {
    let spawned = std::thread::Builder::new()
        .name(APPLICATION_NAME.into())
        .spawn(move || run(&target, &sink));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the PostgreSQL listener; waiters poll");
    }
}

/// Why [`serve`] stopped.
enum Ended {
    /// The store is gone: the thread ends.
    StoreGone,
    /// The connection failed: connect again.
    Dropped(String),
}

fn run(target: &Target, sink: &Weak<dyn ChangeSink>) {
    let mut pause = FIRST_PAUSE;
    while sink.strong_count() > 0 {
        match listen(target) {
            Ok(mut client) => {
                let Some(open) = sink.upgrade() else { return };
                open.channel(true);
                drop(open);
                pause = FIRST_PAUSE;
                match serve(target, &mut client, sink) {
                    Ended::StoreGone => return,
                    Ended::Dropped(why) => {
                        if let Some(sink) = sink.upgrade() {
                            sink.channel(false);
                        }
                        tracing::warn!(
                            channel = %target.channel, error = %why,
                            "the PostgreSQL listener lost its connection; waiters poll until it is back"
                        );
                    }
                }
            }
            Err(e) => {
                let error = super::error::with_causes(&e);
                tracing::debug!(channel = %target.channel, %error, "cannot listen yet");
            }
        }
        if !pause_while_needed(sink, pause) {
            return;
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// A connection that listens to the target's channel.
fn listen(target: &Target) -> Result<postgres::Client, postgres::Error> {
    let mut client = target.config.connect(target.tls.clone())?;
    // The channel is made of a-z, 0-9 and _ (schema.rs), quoted all the same.
    client.batch_execute(&format!("LISTEN \"{}\"", target.channel))?;
    Ok(client)
}

/// Hands each notification to the sink until the connection fails or the
/// store is gone.
fn serve(target: &Target, client: &mut postgres::Client, sink: &Weak<dyn ChangeSink>) -> Ended {
    let mut heard = Instant::now();
    loop {
        let next = client.notifications().timeout_iter(TICK).next();
        match next {
            Ok(Some(note)) => {
                heard = Instant::now();
                let Some(sink) = sink.upgrade() else {
                    return Ended::StoreGone;
                };
                match idemkit_core::hex::decode(note.payload()) {
                    Some(id) if note.channel() == target.channel => sink.changed(&id),
                    _ => tracing::debug!(
                        channel = %note.channel(), "ignoring a notification that names no record"
                    ),
                }
            }
            Ok(None) => {
                if client.is_closed() {
                    return Ended::Dropped("the server closed the connection".into());
                }
                if sink.strong_count() == 0 {
                    return Ended::StoreGone;
                }
                if heard.elapsed() >= CHECK_AFTER {
                    if let Err(e) = client.is_valid(target.check_within) {
                        return Ended::Dropped(super::error::with_causes(&e));
                    }
                    heard = Instant::now();
                }
            }
            Err(e) => return Ended::Dropped(super::error::with_causes(&e)),
        }
    }
}

/// Sleeps `pause` in steps of at most [`TICK`]; `false` when the store went
/// away meanwhile.
fn pause_while_needed(sink: &Weak<dyn ChangeSink>, pause: Duration) -> bool {
    let until = Instant::now() + pause;
    loop {
        if sink.strong_count() == 0 {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(TICK));
    }
}
