//! Getting a redb [`Database`] for one transaction: kept open (a store owned by one
//! process) or opened around each transaction (a file shared by several processes,
//! as the `idemkit` CLI does), with the idemkit format check and lock retries.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::{
    Database, DatabaseError, Durability, ReadTransaction, ReadableDatabase, StorageBackend,
    TableHandle, WriteTransaction,
};

use super::error::{OpenError, StorageError};
use super::tables::{
    FORMAT_VERSION, GC_DUE, LEASE_EXPIRY, MAGIC, META, META_FORMAT, META_MAGIC, RECORDS, UNKNOWN,
};

/// How long a shared store keeps retrying a file locked by another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRetry {
    /// Total time to keep trying before giving up with [`OpenError::Busy`].
    pub budget: Duration,
    /// The longest single wait between two attempts (waits grow exponentially up to
    /// this, with full jitter).
    pub max_backoff: Duration,
}

impl Default for LockRetry {
    fn default() -> Self {
        LockRetry {
            budget: Duration::from_secs(5),
            max_backoff: Duration::from_millis(50),
        }
    }
}

#[derive(Debug)]
pub(crate) enum Handle {
    /// One database handle for the life of the store (in-memory, custom backend, or a
    /// file this process owns).
    Open(Arc<Database>),
    /// Open the file for each transaction and close it right after, so several
    /// processes can take turns.
    PerTransaction {
        path: PathBuf,
        retry: std::sync::Mutex<LockRetry>,
    },
    /// No redb database: every operation is applied by PostgreSQL (the store's
    /// methods dispatch before they reach a transaction).
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgStore),
}

impl Handle {
    pub(crate) fn set_lock_retry(&self, new: LockRetry) {
        if let Handle::PerTransaction { retry, .. } = self {
            *retry.lock().unwrap_or_else(|p| p.into_inner()) = new;
        }
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Handle::Open(_) => None,
            Handle::PerTransaction { path, .. } => Some(path),
            #[cfg(feature = "postgres")]
            Handle::Postgres(_) => None,
        }
    }

    fn database(&self) -> Result<Arc<Database>, OpenError> {
        match self {
            Handle::Open(db) => Ok(Arc::clone(db)),
            Handle::PerTransaction { path, retry } => {
                // A poisoned lock still holds a valid `LockRetry` (plain data).
                let retry = *retry.lock().unwrap_or_else(|p| p.into_inner());
                open_file_with_retry(path, retry, Integrity::Trust).map(Arc::new)
            }
            #[cfg(feature = "postgres")]
            Handle::Postgres(_) => Err(OpenError::NotIdemkit {
                detail: "a PostgreSQL store has no redb database".into(),
            }),
        }
    }

    /// Runs `f` in one write transaction committed with [`Durability::Immediate`]:
    /// when this returns `Ok`, the commit is durable. When `f` fails, nothing is
    /// written.
    ///
    /// `f` also says whether it wrote anything; a
    /// transaction that wrote nothing is aborted instead of committed, which
    /// saves a sync for the common read-only answers (Replay, InFlight). The
    /// decision was still taken under the write lock, so it is just as atomic.
    pub(crate) fn write_if_changed<T, E>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<(T, bool), E>,
    ) -> Result<T, E>
    where
        E: From<StorageError>,
    {
        let db = self.database().map_err(StorageError::from)?;
        let mut txn = db.begin_write().map_err(StorageError::from)?;
        txn.set_durability(Durability::Immediate)
            .map_err(StorageError::from)?;
        // redb may panic on pages damaged after the integrity check at open; a
        // panic here must not take the caller down. Dropping the transaction
        // during the unwind aborts it, so nothing is written.
        let decided = catch_unwind(AssertUnwindSafe(|| f(&txn))).map_err(|payload| {
            StorageError::Corrupt {
                detail: panic_text(payload.as_ref()),
            }
        })?;
        match decided {
            Ok((value, true)) => {
                txn.commit().map_err(StorageError::from)?;
                Ok(value)
            }
            Ok((value, false)) => {
                txn.abort().map_err(StorageError::from)?;
                Ok(value)
            }
            Err(e) => {
                // The error from `f` is what matters; an abort failure adds nothing.
                let _ = txn.abort();
                Err(e)
            }
        }
    }

    /// Runs `f` in one read transaction.
    pub(crate) fn read<T, E>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<StorageError>,
    {
        let db = self.database().map_err(StorageError::from)?;
        let txn = db.begin_read().map_err(StorageError::from)?;
        catch_unwind(AssertUnwindSafe(|| f(&txn))).unwrap_or_else(|payload| {
            Err(StorageError::Corrupt {
                detail: panic_text(payload.as_ref()),
            }
            .into())
        })
    }
}

fn jitter_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(nanos)
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

/// A uniformly random duration in `0..=max` (full jitter), from a cheap xorshift:
/// the point is only that processes stop retrying in lockstep.
fn jitter(max: Duration, state: &mut u64) -> Duration {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let max_micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(*state % (max_micros + 1))
}

/// Opens (creating if absent) the file, retrying while another process holds it.
pub(crate) fn open_file_with_retry(
    path: &Path,
    retry: LockRetry,
    check: Integrity,
) -> Result<Database, OpenError> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(1);
    let mut seed = jitter_seed() | 1;
    loop {
        match open_file_once(path, check) {
            Err(OpenError::Busy { .. }) => {
                let waited = started.elapsed();
                if waited >= retry.budget {
                    return Err(OpenError::Busy { waited });
                }
                let pause = jitter(backoff, &mut seed).min(retry.budget.saturating_sub(waited));
                std::thread::sleep(pause);
                backoff = (backoff * 2).min(retry.max_backoff);
            }
            other => return other,
        }
    }
}

/// Whether an open verifies every page's checksum first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Integrity {
    /// redb's full check and repair ([`redb::Builder::set_check_integrity_on_open`]):
    /// a damaged file gives [`OpenError::Corrupt`] instead of a panic later. Reads
    /// the whole file, so it is done once per process, not per transaction.
    Check,
    /// A plain open (redb still recovers from crashes).
    Trust,
}

/// Opens (creating if absent) the file once and checks that it is an idemkit store.
pub(crate) fn open_file_once(path: &Path, check: Integrity) -> Result<Database, OpenError> {
    let path = path.to_owned();
    guarded(move || {
        let db = Database::builder()
            .set_check_integrity_on_open(check == Integrity::Check)
            .create(&path)
            .map_err(open_error_from_database)?;
        ensure_format(&db)?;
        Ok(db)
    })
}

/// Creates (or opens) a store on a custom backend and checks its format.
pub(crate) fn open_backend(backend: impl StorageBackend) -> Result<Database, OpenError> {
    guarded(move || {
        let db = Database::builder()
            .set_check_integrity_on_open(true)
            .create_with_backend(backend)
            .map_err(open_error_from_database)?;
        ensure_format(&db)?;
        Ok(db)
    })
}

/// redb documents that a plain open "may panic" on a file damaged outside redb.
/// Bad stored bytes must give a typed error here, never take the process down, so
/// a panic inside the open is turned into [`OpenError::Corrupt`].
fn guarded(f: impl FnOnce() -> Result<Database, OpenError>) -> Result<Database, OpenError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(OpenError::Corrupt {
            detail: panic_text(payload.as_ref()),
        }),
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    format!("redb panicked reading the file: {text}")
}

fn open_error_from_database(e: DatabaseError) -> OpenError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => OpenError::Busy {
            waited: Duration::ZERO,
        },
        DatabaseError::Storage(redb::StorageError::Corrupted(detail)) => {
            OpenError::Corrupt { detail }
        }
        DatabaseError::Storage(redb::StorageError::Io(io)) => {
            if io.kind() == std::io::ErrorKind::InvalidData {
                OpenError::NotIdemkit {
                    detail: format!("not a redb database ({io})"),
                }
            } else {
                OpenError::Io(io)
            }
        }
        DatabaseError::UpgradeRequired(version) => OpenError::NotIdemkit {
            detail: format!("a redb file of file format {version}, which this build cannot read"),
        },
        other => OpenError::Redb(other.into()),
    }
}

fn redb_open(e: impl Into<redb::Error>) -> OpenError {
    match e.into() {
        redb::Error::Corrupted(detail) => OpenError::Corrupt { detail },
        other => OpenError::Redb(other),
    }
}

/// Checks the metadata table; initializes a brand-new (table-less) database.
fn ensure_format(db: &Database) -> Result<(), OpenError> {
    let read = db.begin_read().map_err(redb_open)?;
    let names: Vec<String> = read
        .list_tables()
        .map_err(redb_open)?
        .map(|t| t.name().to_owned())
        .collect();
    if names.is_empty() {
        drop(read);
        return initialize(db);
    }
    if !names.iter().any(|n| n == META.name()) {
        return Err(OpenError::NotIdemkit {
            detail: format!(
                "a redb database without idemkit metadata (tables: {})",
                names.join(", ")
            ),
        });
    }
    let meta = read.open_table(META).map_err(redb_open)?;
    let magic = meta.get(META_MAGIC).map_err(redb_open)?;
    if magic.as_ref().map(|m| m.value()) != Some(MAGIC) {
        return Err(OpenError::NotIdemkit {
            detail: "the metadata table has no idemkit magic value".to_owned(),
        });
    }
    let format = meta.get(META_FORMAT).map_err(redb_open)?;
    let found = format
        .as_ref()
        .and_then(|v| <[u8; 4]>::try_from(v.value()).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| OpenError::Corrupt {
            detail: "the idemkit format version is missing or malformed".to_owned(),
        })?;
    if found != FORMAT_VERSION {
        return Err(OpenError::UnsupportedFormat {
            found,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

fn initialize(db: &Database) -> Result<(), OpenError> {
    let mut txn = db.begin_write().map_err(redb_open)?;
    txn.set_durability(Durability::Immediate)
        .map_err(redb_open)?;
    {
        // Another process may have initialized the file between our read and this
        // write (both under the file lock only in shared mode): writing the same
        // values again is harmless.
        let mut meta = txn.open_table(META).map_err(redb_open)?;
        meta.insert(META_MAGIC, MAGIC).map_err(redb_open)?;
        meta.insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
            .map_err(redb_open)?;
        txn.open_table(RECORDS).map_err(redb_open)?;
        txn.open_table(GC_DUE).map_err(redb_open)?;
        txn.open_table(LEASE_EXPIRY).map_err(redb_open)?;
        txn.open_table(UNKNOWN).map_err(redb_open)?;
    }
    txn.commit().map_err(redb_open)?;
    Ok(())
}
