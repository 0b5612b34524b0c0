//! Opening a redb database as an idemkit store: the format check (and the
//! upgrade from format 1), the first tables of a new file, the frames of its
//! write-ahead log applied (`wal.rs`), lock retries for a file shared between
//! processes, and a panic inside redb turned into [`OpenError::Corrupt`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::{
    Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, StorageBackend,
    TableHandle,
};

use super::error::OpenError;
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
        // A new file is made whole under another name first (see `create`): redb
        // alone would leave half a file at `path` if killed while making it.
        super::create::create_whole_if_absent(&path, |temp| {
            initialize(
                &Database::builder()
                    .create(temp)
                    .map_err(open_error_from_database)?,
            )
        });
        let db = Database::builder()
            .set_check_integrity_on_open(check == Integrity::Check)
            .create(&path)
            .map_err(|e| match open_error_from_database(e) {
                OpenError::NotIdemkit { detail } => OpenError::NotIdemkit {
                    detail: super::create::describe_foreign_file(&path).unwrap_or(detail),
                },
                other => other,
            })?;
        ensure_format(&db)?;
        super::wal::replay(&path, &db)?;
        Ok(db)
    })
}

/// Opens the store file at `path` again (after an I/O error: see `recover`): it
/// must exist (a reopen never starts an empty store under the old name), and
/// redb's crash recovery runs if the file needs it.
pub(crate) fn open_existing_file(path: &Path) -> Result<Database, OpenError> {
    let path = path.to_owned();
    guarded(move || {
        let db = Database::builder()
            .open(&path)
            .map_err(open_error_from_database)?;
        ensure_format(&db)?;
        super::wal::replay(&path, &db)?;
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
        Err(payload) => Err(OpenError::panicked(payload.as_ref())),
    }
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

pub(crate) fn redb_open(e: impl Into<redb::Error>) -> OpenError {
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
    // Every guard on a page of the read transaction must be gone before the
    // upgrade below writes (redb asserts it).
    let found = {
        let meta = read.open_table(META).map_err(redb_open)?;
        let magic = meta.get(META_MAGIC).map_err(redb_open)?;
        if magic.as_ref().map(|m| m.value()) != Some(MAGIC) {
            return Err(OpenError::NotIdemkit {
                detail: "the metadata table has no idemkit magic value".to_owned(),
            });
        }
        let format = meta.get(META_FORMAT).map_err(redb_open)?;
        format
            .as_ref()
            .and_then(|v| <[u8; 4]>::try_from(v.value()).ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| OpenError::Corrupt {
                detail: "the idemkit format version is missing or malformed".to_owned(),
            })?
    };
    drop(read);
    match found {
        FORMAT_VERSION => Ok(()),
        1 => upgrade_from_format_1(db),
        _ => Err(OpenError::UnsupportedFormat {
            found,
            supported: FORMAT_VERSION,
        }),
    }
}

/// Format 1 stored a record's bytes alone; format 2 puts its version in front
/// ([`super::tables::RECORDS`]). One durable transaction rewrites every record
/// with version 1 and sets the format, so a crash leaves either file whole. A
/// format-1 file's token floor already exceeds the tokens of every record GC
/// deleted; as no format-1 record had a version, version 1 collides with none.
fn upgrade_from_format_1(db: &Database) -> Result<(), OpenError> {
    let mut txn = db.begin_write().map_err(redb_open)?;
    txn.set_durability(Durability::Immediate)
        .map_err(redb_open)?;
    {
        let mut records = txn.open_table(RECORDS).map_err(redb_open)?;
        let old: Vec<(Vec<u8>, Vec<u8>)> = records
            .iter()
            .map_err(redb_open)?
            .map(|entry| {
                entry
                    .map(|(id, bytes)| (id.value().to_vec(), bytes.value().to_vec()))
                    .map_err(redb_open)
            })
            .collect::<Result<_, _>>()?;
        for (id, bytes) in old {
            let value = super::tables::stored_value(super::tables::FIRST_MIGRATED_VERSION, &bytes);
            records
                .insert(id.as_slice(), value.as_slice())
                .map_err(redb_open)?;
        }
        let mut meta = txn.open_table(META).map_err(redb_open)?;
        meta.insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
            .map_err(redb_open)?;
    }
    txn.commit().map_err(redb_open)?;
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
