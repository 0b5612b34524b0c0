//! The simulated downstream systems: a calendar provider that books slots and a
//! messaging provider that sends confirmations. Like real external systems they
//! keep their own state (their own redb file, not idemkit's) and honour their own
//! idempotency keys: a repeated key returns the first result, never a second effect.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A provider's effects: provider idempotency key → effect (JSON).
type Effects = TableDefinition<'static, &'static str, &'static [u8]>;
/// A provider's effect ids: effect id → provider idempotency key.
type EffectIds = TableDefinition<'static, &'static str, &'static str>;

/// Provider idempotency key → booking (JSON).
const BOOKINGS: TableDefinition<&str, &[u8]> = TableDefinition::new("calendar_bookings");
/// Booking id → provider idempotency key.
const BOOKING_IDS: TableDefinition<&str, &str> = TableDefinition::new("calendar_booking_ids");
/// Provider idempotency key → message (JSON).
const MESSAGES: TableDefinition<&str, &[u8]> = TableDefinition::new("messaging_messages");
/// Message id → provider idempotency key.
const MESSAGE_IDS: TableDefinition<&str, &str> = TableDefinition::new("messaging_message_ids");
/// Provider idempotency key → reschedule (JSON).
const RESCHEDULES: TableDefinition<&str, &[u8]> = TableDefinition::new("calendar_reschedules");
/// Reschedule id → provider idempotency key.
const RESCHEDULE_IDS: TableDefinition<&str, &str> = TableDefinition::new("calendar_reschedule_ids");
/// Counters and the crash switch's "already crashed" mark.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// A crash switch of the service, fired at most once per provider database.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Crash {
    /// `--crash-after-provider`.
    AfterProvider,
    /// `--crash-after-note-write`.
    AfterNoteWrite,
}

impl Crash {
    /// The mark in `META` that it fired.
    fn mark(self) -> &'static str {
        match self {
            Crash::AfterProvider => "crash_after_provider_done",
            Crash::AfterNoteWrite => "crash_after_note_write_done",
        }
    }
}

/// One booking in the calendar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Booking {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) customer_id: String,
    pub(crate) slot_id: String,
    /// How many reschedules the calendar performed on this booking (one per
    /// distinct provider key; a repeated key performs nothing).
    #[serde(default)]
    pub(crate) reschedules: u64,
}

/// One reschedule the calendar performed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reschedule {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) booking_id: String,
    pub(crate) from_slot_id: String,
    pub(crate) to_slot_id: String,
}

/// One confirmation sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Message {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) booking_id: String,
}

#[derive(Debug)]
pub(crate) enum ProviderError {
    /// The provider's key was used before with a different request.
    KeyReused,
    /// No booking with that id for that tenant; nothing was done.
    NotFound,
    /// The provider is (simulated) down; nothing was done.
    Unavailable,
    /// The provider's own storage failed.
    Storage(String),
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderError::KeyReused => f.write_str("provider key reused with another request"),
            ProviderError::NotFound => f.write_str("no such booking for this tenant"),
            ProviderError::Unavailable => f.write_str("provider unavailable"),
            ProviderError::Storage(e) => write!(f, "provider storage: {e}"),
        }
    }
}

impl std::error::Error for ProviderError {}

/// Makes `path`, if absent, an empty file only its owner can read (0600): it
/// holds customers' bookings and messages. redb then initialises it in place.
/// An existing file is left as it is; a failure here shows in redb's open.
fn create_private(path: &Path) {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let _ = options.open(path);
}

fn storage(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Storage(e.to_string())
}

/// Both simulated providers, over one database file.
pub(crate) struct Providers {
    db: Database,
    /// How many more notify calls fail (`--fail-notify N`).
    notify_failures_left: AtomicU64,
}

impl Providers {
    pub(crate) fn open(path: &Path, fail_notify: u64) -> Result<Self, ProviderError> {
        create_private(path);
        let db = Database::create(path).map_err(storage)?;
        let txn = db.begin_write().map_err(storage)?;
        {
            txn.open_table(BOOKINGS).map_err(storage)?;
            txn.open_table(BOOKING_IDS).map_err(storage)?;
            txn.open_table(MESSAGES).map_err(storage)?;
            txn.open_table(MESSAGE_IDS).map_err(storage)?;
            txn.open_table(RESCHEDULES).map_err(storage)?;
            txn.open_table(RESCHEDULE_IDS).map_err(storage)?;
            txn.open_table(META).map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        Ok(Providers {
            db,
            notify_failures_left: AtomicU64::new(fail_notify),
        })
    }

    /// Calendar: books `slot_id` for `customer_id` under the provider key `key`.
    /// The same key again returns the same booking.
    pub(crate) fn book(
        &self,
        key: &str,
        tenant: &str,
        customer_id: &str,
        slot_id: &str,
    ) -> Result<Booking, ProviderError> {
        let txn = self.db.begin_write().map_err(storage)?;
        let booking = {
            let mut bookings = txn.open_table(BOOKINGS).map_err(storage)?;
            if let Some(booking) = replayed(&bookings, key, |b: &Booking| {
                b.tenant == tenant && b.customer_id == customer_id && b.slot_id == slot_id
            })? {
                return Ok(booking);
            }
            let seq = next(&txn, "booking_seq")?;
            let booking = Booking {
                id: format!("bk_{seq:06}"),
                tenant: tenant.to_owned(),
                customer_id: customer_id.to_owned(),
                slot_id: slot_id.to_owned(),
                reschedules: 0,
            };
            record(&txn, &mut bookings, BOOKING_IDS, key, &booking.id, &booking)?;
            booking
        };
        txn.commit().map_err(storage)?;
        Ok(booking)
    }

    /// Calendar: the booking made under provider key `key`, if any.
    pub(crate) fn booking_by_key(&self, key: &str) -> Result<Option<Booking>, ProviderError> {
        self.by_key(BOOKINGS, key)
    }

    /// Calendar: the booking with id `id`, if any.
    pub(crate) fn booking(&self, id: &str) -> Result<Option<Booking>, ProviderError> {
        self.by_id(BOOKING_IDS, BOOKINGS, id)
    }

    /// Calendar: every booking of `tenant`, by id.
    pub(crate) fn bookings(&self, tenant: &str) -> Result<Vec<Booking>, ProviderError> {
        let txn = self.db.begin_read().map_err(storage)?;
        let bookings = txn.open_table(BOOKINGS).map_err(storage)?;
        let mut out = Vec::new();
        for entry in bookings.iter().map_err(storage)? {
            let (_, v) = entry.map_err(storage)?;
            let booking: Booking = serde_json::from_slice(v.value()).map_err(storage)?;
            if booking.tenant == tenant {
                out.push(booking);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Calendar: moves booking `booking_id` of `tenant` to `slot_id` under the
    /// provider key `key`. The same key again returns the same reschedule and
    /// moves nothing; the same key with another request is refused.
    pub(crate) fn reschedule(
        &self,
        key: &str,
        tenant: &str,
        booking_id: &str,
        slot_id: &str,
    ) -> Result<Reschedule, ProviderError> {
        let txn = self.db.begin_write().map_err(storage)?;
        let reschedule = {
            let mut reschedules = txn.open_table(RESCHEDULES).map_err(storage)?;
            if let Some(done) = replayed(&reschedules, key, |r: &Reschedule| {
                r.tenant == tenant && r.booking_id == booking_id && r.to_slot_id == slot_id
            })? {
                return Ok(done);
            }
            let booking_key = {
                let ids = txn.open_table(BOOKING_IDS).map_err(storage)?;
                match ids.get(booking_id).map_err(storage)? {
                    Some(k) => k.value().to_owned(),
                    None => return Err(ProviderError::NotFound),
                }
            };
            let mut bookings = txn.open_table(BOOKINGS).map_err(storage)?;
            let mut booking: Booking = match bookings.get(booking_key.as_str()).map_err(storage)? {
                Some(v) => serde_json::from_slice(v.value()).map_err(storage)?,
                None => return Err(ProviderError::NotFound),
            };
            if booking.tenant != tenant {
                return Err(ProviderError::NotFound);
            }
            let seq = next(&txn, "reschedule_seq")?;
            let reschedule = Reschedule {
                id: format!("rs_{seq:06}"),
                tenant: tenant.to_owned(),
                booking_id: booking_id.to_owned(),
                from_slot_id: std::mem::replace(&mut booking.slot_id, slot_id.to_owned()),
                to_slot_id: slot_id.to_owned(),
            };
            booking.reschedules += 1;
            let bytes = serde_json::to_vec(&booking).map_err(storage)?;
            bookings
                .insert(booking_key.as_str(), bytes.as_slice())
                .map_err(storage)?;
            record(
                &txn,
                &mut reschedules,
                RESCHEDULE_IDS,
                key,
                &reschedule.id,
                &reschedule,
            )?;
            reschedule
        };
        txn.commit().map_err(storage)?;
        Ok(reschedule)
    }

    /// Calendar: the reschedule performed under provider key `key`, if any.
    pub(crate) fn reschedule_by_key(&self, key: &str) -> Result<Option<Reschedule>, ProviderError> {
        self.by_key(RESCHEDULES, key)
    }

    /// Calendar: the reschedule with id `id`, if any.
    pub(crate) fn reschedule_by_id(&self, id: &str) -> Result<Option<Reschedule>, ProviderError> {
        self.by_id(RESCHEDULE_IDS, RESCHEDULES, id)
    }

    /// Messaging: sends the confirmation of `booking` under provider key `key`.
    /// The same key again returns the same message. Fails while `--fail-notify`
    /// failures are left, before doing anything.
    pub(crate) fn send_confirmation(
        &self,
        key: &str,
        booking: &Booking,
    ) -> Result<Message, ProviderError> {
        if let Some(existing) = self.message_by_key(key)? {
            return Ok(existing);
        }
        let failing = self
            .notify_failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(ProviderError::Unavailable);
        }
        let txn = self.db.begin_write().map_err(storage)?;
        let message = {
            let mut messages = txn.open_table(MESSAGES).map_err(storage)?;
            if let Some(existing) = messages.get(key).map_err(storage)? {
                return serde_json::from_slice(existing.value()).map_err(storage);
            }
            let seq = next(&txn, "message_seq")?;
            let message = Message {
                id: format!("msg_{seq:06}"),
                tenant: booking.tenant.clone(),
                booking_id: booking.id.clone(),
            };
            record(&txn, &mut messages, MESSAGE_IDS, key, &message.id, &message)?;
            message
        };
        txn.commit().map_err(storage)?;
        Ok(message)
    }

    fn message_by_key(&self, key: &str) -> Result<Option<Message>, ProviderError> {
        self.by_key(MESSAGES, key)
    }

    /// Messaging: the message with id `id`, if any.
    pub(crate) fn message(&self, id: &str) -> Result<Option<Message>, ProviderError> {
        self.by_id(MESSAGE_IDS, MESSAGES, id)
    }

    /// The effect recorded under provider key `key` in `effects`, if any.
    fn by_key<T: DeserializeOwned>(
        &self,
        effects: Effects,
        key: &str,
    ) -> Result<Option<T>, ProviderError> {
        let txn = self.db.begin_read().map_err(storage)?;
        let effects = txn.open_table(effects).map_err(storage)?;
        match effects.get(key).map_err(storage)? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value()).map_err(storage)?)),
            None => Ok(None),
        }
    }

    /// The effect with id `id`: `ids` names its provider key in `effects`.
    fn by_id<T: DeserializeOwned>(
        &self,
        ids: EffectIds,
        effects: Effects,
        id: &str,
    ) -> Result<Option<T>, ProviderError> {
        let key = {
            let txn = self.db.begin_read().map_err(storage)?;
            let ids = txn.open_table(ids).map_err(storage)?;
            match ids.get(id).map_err(storage)? {
                Some(k) => k.value().to_owned(),
                None => return Ok(None),
            }
        };
        self.by_key(effects, &key)
    }

    /// The crash switch: true exactly once per provider database (the mark is
    /// durable before the caller aborts, so a restarted process never crashes again).
    pub(crate) fn take_crash(&self, crash: Crash) -> Result<bool, ProviderError> {
        let txn = self.db.begin_write().map_err(storage)?;
        let first = {
            let mut meta = txn.open_table(META).map_err(storage)?;
            let done = meta.get(crash.mark()).map_err(storage)?.is_some();
            if !done {
                meta.insert(crash.mark(), 1).map_err(storage)?;
            }
            !done
        };
        txn.commit().map_err(storage)?;
        Ok(first)
    }
}

/// The effect already made under provider key `key` in `effects`, if any: the
/// same request again (`same` holds) gets it back, another request under that
/// key is refused (`KeyReused`) and does nothing.
fn replayed<T: DeserializeOwned>(
    effects: &redb::Table<'_, &'static str, &'static [u8]>,
    key: &str,
    same: impl FnOnce(&T) -> bool,
) -> Result<Option<T>, ProviderError> {
    let Some(existing) = effects.get(key).map_err(storage)? else {
        return Ok(None);
    };
    let effect: T = serde_json::from_slice(existing.value()).map_err(storage)?;
    if same(&effect) {
        Ok(Some(effect))
    } else {
        Err(ProviderError::KeyReused)
    }
}

/// Records `effect` under provider key `key` in `effects`, and its `id` in `ids`,
/// in the caller's transaction (both or neither).
fn record<T: Serialize>(
    txn: &redb::WriteTransaction,
    effects: &mut redb::Table<'_, &'static str, &'static [u8]>,
    ids: EffectIds,
    key: &str,
    id: &str,
    effect: &T,
) -> Result<(), ProviderError> {
    let bytes = serde_json::to_vec(effect).map_err(storage)?;
    effects.insert(key, bytes.as_slice()).map_err(storage)?;
    let mut ids = txn.open_table(ids).map_err(storage)?;
    ids.insert(id, key).map_err(storage)?;
    Ok(())
}

fn next(txn: &redb::WriteTransaction, name: &str) -> Result<u64, ProviderError> {
    let mut meta = txn.open_table(META).map_err(storage)?;
    let n = meta.get(name).map_err(storage)?.map_or(0, |v| v.value()) + 1;
    meta.insert(name, n).map_err(storage)?;
    Ok(n)
}
