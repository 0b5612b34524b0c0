//! The redb tables of an idemkit database and the format check.
//!
//! | table | key | value | holds |
//! |---|---|---|---|
//! | `idemkit.meta` | `&str` | bytes | `magic` = [`MAGIC`], `format` = [`FORMAT_VERSION`] (u32 LE), `token_floor`, `version_floor` and `wal_applied` (u64 LE, absent = 0) |
//! | `idemkit.records` | record id bytes | version (u64 LE) + `Record::encode()` | every record |
//! | `idemkit.gc_due` | `(due_at ms, id)` | `()` | Completed/Released records by next GC step |
//! | `idemkit.lease_expiry` | `(expires_at ms, id)` | `()` | Running records by lease expiry |
//! | `idemkit.unknown` | id | `since` ms | Unknown records |
//!
//! The three indexes are derived from the records (`Record::gc_due_at`,
//! `Record::lease_expires_at`, the Unknown state) and are rewritten in the same write
//! transaction as the record, so they can never disagree with it after a commit.

use redb::TableDefinition;

/// Store-wide metadata: what kind of file this is and its format version.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("idemkit.meta");
/// Record id bytes → encoded record.
pub(crate) const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemkit.records");
/// `(due_at, id)` for every record GC will act on once `due_at` has passed.
pub(crate) const GC_DUE: TableDefinition<(u64, &[u8]), ()> = TableDefinition::new("idemkit.gc_due");
/// `(lease expires_at, id)` for every Running record.
pub(crate) const LEASE_EXPIRY: TableDefinition<(u64, &[u8]), ()> =
    TableDefinition::new("idemkit.lease_expiry");
/// id → `since` for every Unknown record.
pub(crate) const UNKNOWN: TableDefinition<&[u8], u64> = TableDefinition::new("idemkit.unknown");

/// The `magic` value in [`META`]: this file is an idemkit store.
pub(crate) const MAGIC: &[u8] = b"idemkit store";
/// The store format this build writes and reads.
///
/// | format | records hold |
/// |---|---|
/// | 1 | the encoded record |
/// | 2 | its version (8 bytes, u64 LE), then the encoded record |
///
/// A format-1 file is upgraded in place when it is opened (one durable
/// transaction; an older build then refuses the file as format 2).
pub const FORMAT_VERSION: u32 = 2;

/// The version every record of an upgraded format-1 file gets.
pub(crate) const FIRST_MIGRATED_VERSION: u64 = 1;

/// A record value: `version` then the encoded record (`records::Encoded`
/// writes the same from a record).
pub(crate) fn stored_value(version: u64, record: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(8 + record.len());
    value.extend_from_slice(&version.to_le_bytes());
    value.extend_from_slice(record);
    value
}

/// Splits a record value into its version and the encoded record; `None` when
/// it is too short to hold a version.
pub(crate) fn split_value(value: &[u8]) -> Option<(u64, &[u8])> {
    let (version, record) = value.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*version), record))
}
/// Meta key of the magic value.
pub(crate) const META_MAGIC: &str = "magic";
/// Meta key of the format version.
pub(crate) const META_FORMAT: &str = "format";
/// Meta key of the token floor: the highest fencing token of any record GC
/// deleted. A fresh record's first token is above it, so tokens never repeat for
/// a key even after its record was deleted. Absent in stores that never deleted
/// a record (it reads as 0, so the file format did not change).
pub(crate) const META_TOKEN_FLOOR: &str = "token_floor";
/// Meta key of the version floor (format 2): the highest version of any record
/// GC deleted. A fresh record's version is above it, so a version never
/// repeats for an id. Absent (0) until GC deleted a record.
pub(crate) const META_VERSION_FLOOR: &str = "version_floor";
/// Meta key of the instant (Unix ms, u64 LE) the database was last reopened
/// after an I/O error: the durable write that proved it writable again
/// (`recover.rs`). Absent until then; nothing reads it back, so the file
/// format did not change.
pub(crate) const META_LAST_RECOVERY: &str = "last_recovery";
/// Meta key of the sequence number (u64 LE) of the last write-ahead log frame
/// the database holds (`wal.rs`): a replay applies only the later ones.
/// Absent (0) in a store never written through its log; older builds ignore
/// it, so the file format did not change.
pub(crate) const META_WAL_APPLIED: &str = "wal_applied";
