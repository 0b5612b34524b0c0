//! Requests waiting for a running key's outcome, woken by the write that ends
//! its Running state (`Prefer: wait`, docs/architecture.md "HTTP contract").
//!
//! A waiter registers a [`Watch`] on a record id, reads the record again, and
//! — if it still runs — awaits [`Watch::changed`]. The engine wakes every
//! watch of an id after a write that leaves it not Running (completed,
//! released, Unknown, resolved, deleted), in this process. Another process's
//! writes reach it only through an adapter that announces them
//! ([`Adapter::announce_to`]: PostgreSQL's `LISTEN`/`NOTIFY`); without one,
//! or while that channel is down, waiters poll the record with backoff
//! (`idemkit_core::http::prefer::fallback_poll`): [`Store::waits_are_woken`]
//! says which.
//!
//! Registering before the second read is what makes the wake-up impossible to
//! miss: a completion that lands after the watch exists bumps its generation,
//! whether or not the future was polled yet.
//!
//! Every store built over one adapter shares its waiters (clones, and stores
//! made with [`Store::new`] over the same `Arc`). Waiters are bounded per key
//! and in all ([`WaitLimits`]); a dropped watch
//! (a client that disconnected) frees its slot at once and leaves nothing
//! behind.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, Weak};
use std::task::{Context, Poll, Waker};

use idemkit_core::RecordId;
use idemkit_core::http::prefer::{DEFAULT_MAX_WAITERS, DEFAULT_MAX_WAITERS_PER_KEY};

use super::Store;
use crate::adapters::ChangeSink;

/// How many requests may wait at once, on one key and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitLimits {
    /// Waiters on one key.
    pub per_key: usize,
    /// Waiters on every key of the store together.
    pub total: usize,
}

impl Default for WaitLimits {
    /// Core's defaults, which every binding shares: 1,024 per key
    /// ([`DEFAULT_MAX_WAITERS_PER_KEY`]) and 10,000 in all
    /// ([`DEFAULT_MAX_WAITERS`]).
    fn default() -> Self {
        WaitLimits {
            per_key: DEFAULT_MAX_WAITERS_PER_KEY,
            total: DEFAULT_MAX_WAITERS,
        }
    }
}

/// Refused: as many requests as [`WaitLimits`] allows already wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyWaiters {
    /// Whether the key's own limit was the one reached (else the total).
    pub on_key: bool,
}

impl fmt::Display for TooManyWaiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.on_key {
            f.write_str("too many requests already wait on this key")
        } else {
            f.write_str("too many requests already wait on this store")
        }
    }
}

impl std::error::Error for TooManyWaiters {}

/// The waiters of one store (shared by its clones).
pub(crate) struct Waiters {
    state: Mutex<State>,
    /// How many watches exist: the engine's write path reads only this when
    /// nobody waits.
    count: AtomicUsize,
    /// Whether another process's writes reach this store's waiters (the
    /// adapter's announcements are flowing).
    announced: AtomicBool,
    /// The adapter is asked to announce once, on the first watch.
    started: Once,
    limits: Mutex<WaitLimits>,
}

#[derive(Default)]
struct State {
    keys: HashMap<Vec<u8>, Key>,
    next_slot: u64,
    /// Bumped when the announcement channel opens or drops, to wake every
    /// waiter so it picks its way of waiting again.
    epoch: u64,
}

#[derive(Default)]
struct Key {
    generation: u64,
    slots: Vec<(u64, Option<Waker>)>,
}

impl fmt::Debug for Waiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiters")
            .field("count", &self.count.load(Ordering::Relaxed))
            .field("announced", &self.announced.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Waiters {
    fn default() -> Self {
        Waiters {
            state: Mutex::default(),
            count: AtomicUsize::new(0),
            announced: AtomicBool::new(false),
            started: Once::new(),
            limits: Mutex::new(WaitLimits::default()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state stays consistent at every unlock; a panic elsewhere while it
    // was held cannot leave it half-written.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Waiters {
    /// Whether the adapter was asked to announce (on the first watch).
    pub(crate) fn started(&self) -> bool {
        self.started.is_completed()
    }

    /// The waiters of every store over `adapter`: two `Store`s built over one
    /// adapter (not only clones of one store) see each other's completions.
    pub(crate) fn of(adapter: &Arc<dyn crate::adapters::Adapter>) -> Arc<Waiters> {
        type Entry = (Weak<dyn crate::adapters::Adapter>, Weak<Waiters>);
        static SHARED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
        let mut shared = lock(&SHARED);
        shared.retain(|(a, w)| a.strong_count() > 0 && w.strong_count() > 0);
        let address = Arc::as_ptr(adapter).cast::<()>();
        if let Some(waiters) = shared
            .iter()
            .find(|(a, _)| std::ptr::eq(a.as_ptr().cast::<()>(), address))
            .and_then(|(_, w)| w.upgrade())
        {
            return waiters;
        }
        let waiters = Arc::new(Waiters::default());
        shared.push((Arc::downgrade(adapter), Arc::downgrade(&waiters)));
        waiters
    }

    fn register(self: &Arc<Self>, id: &RecordId) -> Result<Watch, TooManyWaiters> {
        let limits = *lock(&self.limits);
        let mut state = lock(&self.state);
        if self.count.load(Ordering::Relaxed) >= limits.total {
            return Err(TooManyWaiters { on_key: false });
        }
        let epoch = state.epoch;
        let slot = state.next_slot;
        state.next_slot += 1;
        let key = state.keys.entry(id.as_bytes().to_vec()).or_default();
        if key.slots.len() >= limits.per_key {
            return Err(TooManyWaiters { on_key: true });
        }
        key.slots.push((slot, None));
        let generation = key.generation;
        self.count.fetch_add(1, Ordering::Relaxed);
        Ok(Watch {
            waiters: Arc::clone(self),
            id: id.as_bytes().to_vec(),
            slot,
            seen: (generation, epoch),
            marked: true,
        })
    }

    /// Wakes every watch of `id`.
    pub(crate) fn wake(&self, id: &[u8]) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut state = lock(&self.state);
        if let Some(key) = state.keys.get_mut(id) {
            key.generation += 1;
            for (_, waker) in &mut key.slots {
                if let Some(w) = waker.take() {
                    w.wake();
                }
            }
        }
    }

    fn wake_all(&self) {
        let mut state = lock(&self.state);
        state.epoch += 1;
        for key in state.keys.values_mut() {
            for (_, waker) in &mut key.slots {
                if let Some(w) = waker.take() {
                    w.wake();
                }
            }
        }
    }
}

impl ChangeSink for Waiters {
    fn changed(&self, id: &[u8]) {
        self.wake(id);
    }

    fn channel(&self, open: bool) {
        if self.announced.swap(open, Ordering::SeqCst) != open {
            self.wake_all();
        }
    }
}

/// One request's registration as a waiter on a record id. Dropping it
/// (the request answered, or its client gone) unregisters it.
pub struct Watch {
    waiters: Arc<Waiters>,
    id: Vec<u8>,
    slot: u64,
    /// The key's generation and the store's epoch last seen.
    seen: (u64, u64),
    /// The adapter took the mark that makes another process's write announce
    /// this record ([`Adapter::watch`](crate::adapters::Adapter::watch)).
    marked: bool,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("slot", &self.slot)
            .field("seen", &self.seen)
            .field("marked", &self.marked)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// Resolves once the record was written out of Running since the watch
    /// was made (or since this last resolved), or when the way waiters are
    /// woken changed ([`Store::waits_are_woken`]). The caller reads the
    /// record again: a wake-up is a reason to look, not an answer.
    pub fn changed(&mut self) -> Changed<'_> {
        Changed { watch: self }
    }

    /// Whether another process's write that ends the record's Running state
    /// will be announced to this watch, as far as this side can make it: false
    /// when the adapter could not mark the record ([`Store::watch`]), and the
    /// waiter should poll the record as when [`Store::waits_are_woken`] is false.
    #[must_use]
    pub fn is_marked(&self) -> bool {
        self.marked
    }
}

/// The future of [`Watch::changed`].
#[must_use = "a future does nothing unless awaited"]
pub struct Changed<'a> {
    watch: &'a mut Watch,
}

impl fmt::Debug for Changed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Changed").finish_non_exhaustive()
    }
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let watch = &mut *self.watch;
        let mut state = lock(&watch.waiters.state);
        let epoch = state.epoch;
        let Some(key) = state.keys.get_mut(&watch.id) else {
            return Poll::Ready(());
        };
        let now = (key.generation, epoch);
        if now != watch.seen {
            watch.seen = now;
            return Poll::Ready(());
        }
        if let Some((_, waker)) = key.slots.iter_mut().find(|(s, _)| *s == watch.slot) {
            match waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut state = lock(&self.waiters.state);
        if let Some(key) = state.keys.get_mut(&self.id) {
            key.slots.retain(|(s, _)| *s != self.slot);
            if key.slots.is_empty() {
                state.keys.remove(&self.id);
            }
        }
        self.waiters.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Store {
    /// Registers a waiter on `id`, to learn when the record leaves Running.
    /// Register **before** reading the record again, so a completion between
    /// that read and the wait is not missed.
    ///
    /// On a shared database this also marks the record as waited on
    /// ([`Adapter::watch`](crate::adapters::Adapter::watch): PostgreSQL's
    /// completions announce only marked records), which is I/O: call it where
    /// blocking is allowed, as any store call. A mark that failed leaves the
    /// watch registered but [not marked](Watch::is_marked).
    ///
    /// # Errors
    ///
    /// [`TooManyWaiters`] when the key's or the store's limit is reached.
    pub fn watch(&self, id: &RecordId) -> Result<Watch, TooManyWaiters> {
        let waiters = &self.waiters;
        waiters.started.call_once(|| {
            let sink: Arc<dyn ChangeSink> = Arc::clone(waiters) as Arc<dyn ChangeSink>;
            self.adapter.announce_to(sink);
        });
        let mut watch = waiters.register(id)?;
        // After the registration: a write announced from now on reaches it.
        if !self.adapter.held_alone() {
            watch.marked = self.adapter.watch(id).is_ok();
        }
        Ok(watch)
    }

    /// How many requests wait on this store now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waiters.count.load(Ordering::Relaxed)
    }

    /// Sets how many requests may wait at once (shared by this store's clones).
    pub fn set_wait_limits(&self, limits: WaitLimits) {
        *lock(&self.waiters.limits) = limits;
    }

    /// Whether every completion that ends a wait wakes its waiters: this
    /// process holds the database alone ([`Adapter::held_alone`](crate::adapters::Adapter::held_alone)),
    /// or the adapter announces other processes' writes and its channel is up.
    /// When not, waiters also poll the record.
    #[must_use]
    pub fn waits_are_woken(&self) -> bool {
        self.adapter.held_alone() || self.waiters.announced.load(Ordering::SeqCst)
    }

    /// Wakes the waiters of `id` (after a write this process made that ended
    /// its Running state).
    pub(crate) fn wake(&self, id: &RecordId) {
        self.waiters.wake(id.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::task::Wake;

    use super::*;
    use idemkit_core::{IdempotencyKey, Scope};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn id(key: &str) -> RecordId {
        Scope::new("t", "op")
            .unwrap()
            .record_id(&IdempotencyKey::parse_header(key.as_bytes()).unwrap())
    }

    fn poll(watch: &mut Watch, waker: &Waker) -> Poll<()> {
        let mut changed = watch.changed();
        Pin::new(&mut changed).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_wake_before_the_first_poll_is_not_lost() {
        let store = crate::in_memory().unwrap();
        let mut watch = store.watch(&id("k1")).unwrap();
        store.wake(&id("k1"));
        let waker = Waker::noop();
        assert_eq!(poll(&mut watch, waker), Poll::Ready(()));
        assert_eq!(poll(&mut watch, waker), Poll::Pending);
    }

    #[test]
    fn a_wake_reaches_only_its_key_and_calls_the_waker() {
        let store = crate::in_memory().unwrap();
        let mut on_a = store.watch(&id("a")).unwrap();
        let mut on_b = store.watch(&id("b")).unwrap();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        assert_eq!(poll(&mut on_a, &waker), Poll::Pending);
        assert_eq!(poll(&mut on_b, &waker), Poll::Pending);
        store.wake(&id("a"));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll(&mut on_a, &waker), Poll::Ready(()));
        assert_eq!(poll(&mut on_b, &waker), Poll::Pending);
    }

    #[test]
    fn limits_refuse_past_the_cap_and_dropped_watches_free_their_slots() {
        let store = crate::in_memory().unwrap();
        store.set_wait_limits(WaitLimits {
            per_key: 2,
            total: 3,
        });
        let a1 = store.watch(&id("a")).unwrap();
        let a2 = store.watch(&id("a")).unwrap();
        assert_eq!(
            store.watch(&id("a")).unwrap_err(),
            TooManyWaiters { on_key: true }
        );
        let b1 = store.watch(&id("b")).unwrap();
        assert_eq!(
            store.watch(&id("c")).unwrap_err(),
            TooManyWaiters { on_key: false }
        );
        assert_eq!(store.waiting(), 3);
        drop((a1, a2, b1));
        assert_eq!(store.waiting(), 0);
        assert!(store.waiters.state.lock().unwrap().keys.is_empty());
    }

    #[test]
    fn stores_built_over_one_adapter_wake_each_others_waiters() {
        let adapter: Arc<dyn crate::adapters::Adapter> =
            Arc::new(crate::adapters::memory::MemoryAdapter::default());
        let one = Store::new(Arc::clone(&adapter));
        let other = Store::new(Arc::clone(&adapter));
        let elsewhere = crate::in_memory().unwrap();
        let mut watch = other.watch(&id("a")).unwrap();
        let mut unrelated = elsewhere.watch(&id("a")).unwrap();
        let waker = Waker::noop();
        assert_eq!(poll(&mut watch, waker), Poll::Pending);
        one.wake(&id("a"));
        assert_eq!(poll(&mut watch, waker), Poll::Ready(()));
        assert_eq!(poll(&mut unrelated, waker), Poll::Pending);
    }

    #[test]
    fn the_channel_opening_or_dropping_wakes_every_waiter() {
        let store = crate::in_memory().unwrap();
        let mut watch = store.watch(&id("a")).unwrap();
        let waker = Waker::noop();
        assert_eq!(poll(&mut watch, waker), Poll::Pending);
        store.waiters.channel(true);
        assert_eq!(poll(&mut watch, waker), Poll::Ready(()));
        store.waiters.channel(true);
        assert_eq!(poll(&mut watch, waker), Poll::Pending);
        store.waiters.channel(false);
        assert_eq!(poll(&mut watch, waker), Poll::Ready(()));
    }
}
