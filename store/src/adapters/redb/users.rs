//! Who else uses a store file: the processes that open it per transaction
//! ([`RedbAdapter::open_shared`](super::RedbAdapter::open_shared), the `idemkit`
//! CLI) hold a *shared* lock on a sidecar file, `<file>.lock`, for as long as they
//! may hold a lease in it.
//!
//! A process that opens the file for its own life ([`RedbAdapter::open`](super::RedbAdapter::open))
//! holds redb's lock, and would conclude that every Running record it finds was
//! left by a process that is gone. That is true of the processes that hold
//! the file open, not of one that opens it per transaction and is between two
//! (`idemkit exec` running its command). So before such leases are settled, the
//! sidecar is probed with an exclusive lock: taken (and let go at once), nobody
//! uses the file in shared mode; refused, someone does, and leases are left to
//! their expiry.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// `<file>.lock`, beside the store file.
fn sidecar(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// This process's shared claim on a store file's sidecar, released when dropped.
#[derive(Debug)]
pub(crate) struct SharedUse(Option<File>);

impl SharedUse {
    /// Takes the shared lock on `db`'s sidecar (creating it), waiting only for
    /// a probe's momentary exclusive lock.
    pub(crate) fn announce(db: &Path) -> SharedUse {
        let locked = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(sidecar(db))
            .and_then(|file| file.lock_shared().map(|()| file));
        match locked {
            Ok(file) => SharedUse(Some(file)),
            Err(e) => {
                // Then a process that opens the file for its life may take this
                // process's leases for orphans; they are still fenced, so the
                // worst is a command that learns its lease was settled.
                tracing::warn!(
                    error = %e,
                    path = %sidecar(db).display(),
                    "cannot hold the shared-use lock beside the store file"
                );
                SharedUse(None)
            }
        }
    }

    /// Another claim on the same lock (the same open file).
    pub(crate) fn share(&self) -> SharedUse {
        SharedUse(self.0.as_ref().and_then(|file| file.try_clone().ok()))
    }
}

/// Whether some process uses `db` in shared mode now. Unknown counts as yes:
/// the caller then leaves leases to their expiry, which is always safe.
pub(crate) fn shared_users_present(db: &Path) -> bool {
    let file = match OpenOptions::new().read(true).write(true).open(sidecar(db)) {
        Ok(file) => file,
        // Never used in shared mode.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(_) => return true,
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock | TryLockError::Error(_)) => true,
    }
}
