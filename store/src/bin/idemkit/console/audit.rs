//! The audit log of operator actions: one JSON object per line, appended and
//! flushed to disk before the action is answered, read back newest first by
//! the console. It never holds a key or a body: a record is named by its log
//! reference, as in every other log of the proxy.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// How much of the file's end [`AuditLog::newest`] reads: entries beyond it
/// stay in the file for whoever reads it whole.
const TAIL_BYTES: u64 = 4 << 20;

/// One operator action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AuditEntry {
    /// When, in Unix milliseconds.
    pub(crate) at_ms: u64,
    /// The name the operator gave (at login, or `by` in the admin API).
    pub(crate) operator: String,
    /// The address the request came from.
    pub(crate) peer: String,
    pub(crate) log_ref: String,
    pub(crate) tenant: String,
    pub(crate) operation: String,
    /// The record's state before and after.
    pub(crate) from: String,
    pub(crate) to: String,
    /// Whether the operator said the effect happened.
    pub(crate) applied: bool,
    /// With `applied`: the status retries replay from now on.
    pub(crate) status: Option<u16>,
    pub(crate) resource_ref: Option<String>,
    /// Why: required in the console, optional in the admin API.
    pub(crate) note: Option<String>,
}

pub(crate) struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    /// Opens `path` for appending, creating it (and nothing else) if absent.
    pub(crate) fn open(path: &Path) -> Result<AuditLog, String> {
        let failed = |e: std::io::Error| format!("audit log {}: {e}", path.display());
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(failed)?;
        // A line cut by a crash is ended, so the next entry starts a line of
        // its own instead of being lost with it.
        let len = file.metadata().map_err(failed)?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1)).map_err(failed)?;
            file.read_exact(&mut last).map_err(failed)?;
            if last != *b"\n" {
                file.write_all(b"\n").map_err(failed)?;
            }
        }
        Ok(AuditLog {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` and waits until it is on disk.
    pub(crate) fn append(&self, entry: &AuditEntry) -> Result<(), String> {
        let mut line = serde_json::to_vec(entry).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // One write of the whole line: appends from other processes sharing
        // the file cannot interleave inside it.
        (&*file)
            .write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("audit log {}: {e}", self.path.display()))
    }

    /// The newest `limit` entries, newest first, from the file's last
    /// [`TAIL_BYTES`]; a line that does not parse (cut by a crash) is skipped.
    #[cfg(test)]
    pub(crate) fn newest(&self, limit: usize) -> Result<Vec<AuditEntry>, String> {
        self.newest_of(limit, None)
    }

    /// [`newest`](Self::newest), of the record `log_ref` only when given.
    pub(crate) fn newest_of(
        &self,
        limit: usize,
        log_ref: Option<&str>,
    ) -> Result<Vec<AuditEntry>, String> {
        let failed = |e: std::io::Error| format!("audit log {}: {e}", self.path.display());
        let mut file = File::open(&self.path).map_err(failed)?;
        let len = file.metadata().map_err(failed)?.len();
        let start = len.saturating_sub(TAIL_BYTES);
        file.seek(SeekFrom::Start(start)).map_err(failed)?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail).map_err(failed)?;
        let mut lines = tail.split(|&b| b == b'\n');
        if start > 0 {
            // The first line is cut where the tail begins.
            lines.next();
        }
        let mut entries: Vec<AuditEntry> = lines
            .filter_map(|line| serde_json::from_slice::<AuditEntry>(line).ok())
            .filter(|e| log_ref.is_none_or(|r| e.log_ref == r))
            .collect();
        entries.reverse();
        entries.truncate(limit);
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            at_ms: n,
            operator: "Dana".into(),
            peer: "127.0.0.1:1".into(),
            log_ref: format!("ref{n}"),
            tenant: "acme".into(),
            operation: "charge".into(),
            from: "unknown".into(),
            to: "completed".into(),
            applied: true,
            status: Some(201),
            resource_ref: None,
            note: Some("checked with the provider".into()),
        }
    }

    #[test]
    fn entries_read_back_newest_first_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        for n in 1..=3 {
            log.append(&entry(n)).unwrap();
        }
        drop(log);
        let reopened = AuditLog::open(&path).unwrap();
        reopened.append(&entry(4)).unwrap();
        let newest = reopened.newest(3).unwrap();
        let order: Vec<u64> = newest.iter().map(|e| e.at_ms).collect();
        assert_eq!(order, [4, 3, 2]);
        assert_eq!(newest.first(), Some(&entry(4)));
        assert_eq!(reopened.newest_of(10, Some("ref2")).unwrap(), [entry(2)]);
    }

    #[test]
    fn a_line_cut_by_a_crash_is_skipped_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        log.append(&entry(1)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"at_ms\":2,\"oper")
            .unwrap();
        assert_eq!(log.newest(10).unwrap(), [entry(1)]);
        drop(log);
        let reopened = AuditLog::open(&path).unwrap();
        reopened.append(&entry(3)).unwrap();
        assert_eq!(reopened.newest(10).unwrap(), [entry(3), entry(1)]);
    }
}
