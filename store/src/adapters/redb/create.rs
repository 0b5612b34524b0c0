//! Creating a store file so that a crash never leaves half of one at its path.
//!
//! redb initialises a new file in place: it sizes the file, writes its header,
//! and writes the header's magic number last. A process killed in between leaves
//! a non-empty file without the magic number, and redb refuses that file for
//! ever after ("magic number mismatch"): one SIGKILL during a service's first
//! start would keep it from starting again. So a path with no file yet gets a
//! store made whole under a temporary name in the same directory (redb's header,
//! then idemkit's metadata, each durable) and only then its name, by a hard link:
//! a link fails rather than replace a store another process made meanwhile,
//! which a rename would silently do.
//!
//! Where the directory or filesystem cannot do this (no hard links, no room for
//! a second name), the store is created in place as before and the open reports
//! whatever fails there. A file left half-made by an older build is reported by
//! [`describe_foreign_file`] as what it is.
//!
//! Either way the file is private (mode 0600 on unix) from its first byte: it
//! holds raw keys and response bodies. The temporary is made with that mode
//! before redb writes to it (a hard link shares it), and an in-place creation
//! finds an empty private file made here, which redb initialises as a new store.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// redb's header sits in the file's first page; an interrupted creation wrote
/// nothing after it (the file was only sized, and sizing writes zeros).
const HEADER_REGION: u64 = 4096;

/// A temporary file older than this was left by a creation that was killed:
/// making a store takes milliseconds.
const STALE_AFTER: Duration = Duration::from_secs(600);

/// Makes sure a store exists at `path` if no file did, without ever exposing a
/// half-made one there: `make` creates the whole store (redb's header and the
/// caller's tables, durably) at the temporary path it is given. Returns `true`
/// when a store was linked at `path` by this call or by a process that raced it;
/// `false` when there was a file already, or when the whole-file route was not
/// possible here (the caller then opens in place, which creates the file the old
/// way and reports what fails).
pub(crate) fn create_whole_if_absent<E>(
    path: &Path,
    make: impl FnOnce(&Path) -> Result<(), E>,
) -> bool {
    if fs::symlink_metadata(path).is_ok() {
        return false;
    }
    let Some((dir, prefix)) = temp_prefix(path) else {
        let _ = create_private(path);
        return false;
    };
    remove_stale_temporaries(&dir, &prefix);
    let temp = dir.join(format!("{prefix}{}", unique_suffix()));
    // The database is closed when `make` returns, before the link.
    let made = create_private(&temp).is_ok()
        && make(&temp).is_ok()
        && match link_no_replace(&temp, path, &dir) {
            Linked::Yes => true,
            Linked::No => {
                let _ = create_private(path);
                false
            }
        };
    // Whether linked or not, the temporary name goes; a link leaves the store
    // under `path`.
    let _ = fs::remove_file(&temp);
    made
}

/// The directory and the temporaries' name prefix for `path`:
/// `.<file name>.creating-` beside it.
fn temp_prefix(path: &Path) -> Option<(PathBuf, String)> {
    let name = path.file_name()?.to_str()?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    Some((dir, format!(".{name}.creating-")))
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates `path` empty and readable and writable by its owner only (0600 on
/// unix, before the umask, which can only narrow it), failing if it exists.
pub(crate) fn create_private(path: &Path) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map(drop)
}

/// Whether a store now has the name.
enum Linked {
    /// This one, or one another process made meanwhile.
    Yes,
    /// The name could not be given (no hard links here): the store is made in place.
    No,
}

/// Gives the finished store its name unless a file took the name meanwhile
/// (another process creating the same store: theirs is as good), and makes the
/// name durable.
fn link_no_replace(temp: &Path, path: &Path, dir: &Path) -> Linked {
    match fs::hard_link(temp, path) {
        Ok(()) => {
            sync_directory(dir);
            Linked::Yes
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Linked::Yes,
        Err(_) => Linked::No,
    }
}

/// A new name lives in its directory, and a crash can lose it until the
/// directory is synced. Losing it would lose no acknowledged write (none was
/// made yet), so a failure here is not an error.
fn sync_directory(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Removes temporaries of `prefix` in `dir` that were left by a killed creation.
fn remove_stale_temporaries(dir: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let stale = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(prefix))
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|modified| {
                    now.duration_since(modified).unwrap_or_default() > STALE_AFTER
                });
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Says what a file redb refused as "not a redb database" is, when that can be
/// told: a creation killed before it finished (no magic number, nothing written
/// past the header) never held a record, and deleting it loses nothing.
pub(crate) fn describe_foreign_file(path: &Path) -> Option<String> {
    let mut file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut head = [0u8; REDB_MAGIC.len()];
    file.read_exact(&mut head).ok()?;
    if head == REDB_MAGIC || len > 64 * 1024 * 1024 {
        return None;
    }
    let mut rest = Vec::new();
    let mut skipped = vec![0u8; usize::try_from(HEADER_REGION).ok()? - head.len()];
    file.read_exact(&mut skipped).ok()?;
    file.read_to_end(&mut rest).ok()?;
    rest.iter().all(|b| *b == 0).then(|| {
        format!(
            "{} has no redb magic number and nothing past its header: a creation \
             killed before it finished (by a build older than this one) left it, \
             and it never held a record; delete it and open again",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the store's open passes: redb's file and nothing more.
    fn redb_file(temp: &Path) -> Result<(), redb::DatabaseError> {
        redb::Database::builder().create(temp).map(drop)
    }

    fn never_called(_: &Path) -> Result<(), ()> {
        panic!("an existing file must not be made again");
    }

    #[test]
    fn a_present_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("there.redb");
        fs::write(&path, b"not mine").unwrap();
        assert!(!create_whole_if_absent(&path, never_called));
        assert_eq!(fs::read(&path).unwrap(), b"not mine");
    }

    #[test]
    fn an_absent_file_appears_whole_and_no_temporary_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.redb");
        assert!(create_whole_if_absent(&path, redb_file));
        let head = fs::read(&path).unwrap();
        assert_eq!(head[..REDB_MAGIC.len()], REDB_MAGIC);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["new.redb"], "only the store is left");
    }

    #[cfg(unix)]
    #[test]
    fn a_new_store_is_private_from_its_first_byte() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.redb");
        let mut temp_mode = None;
        assert!(create_whole_if_absent(&path, |temp| {
            temp_mode = Some(fs::metadata(temp)?.permissions().mode() & 0o777);
            redb_file(temp).map_err(|e| std::io::Error::other(e.to_string()))
        }));
        assert_eq!(temp_mode, Some(0o600), "the temporary, before redb writes");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the store under its name");
    }

    #[test]
    fn a_failed_initialisation_links_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.redb");
        let made = create_whole_if_absent(&path, |temp| {
            redb_file(temp).unwrap();
            Err("the caller's tables could not be made")
        });
        assert!(!made);
        assert!(fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn stale_temporaries_go_and_fresh_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let stale = dir.path().join(".s.redb.creating-1-0");
        let fresh = dir.path().join(".s.redb.creating-2-0");
        let other = dir.path().join(".t.redb.creating-1-0");
        for p in [&stale, &fresh, &other] {
            fs::write(p, b"x").unwrap();
        }
        let old = SystemTime::now() - STALE_AFTER - Duration::from_secs(60);
        for p in [&stale, &other] {
            fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        assert!(create_whole_if_absent(&path, redb_file));
        assert!(!stale.exists(), "a stale temporary of this store goes");
        assert!(fresh.exists(), "a creation under way keeps its temporary");
        assert!(other.exists(), "another store's temporaries are not ours");
    }

    #[test]
    fn a_half_made_file_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("half.redb");
        // What redb leaves when killed after sizing the file and writing its
        // header without the magic number.
        let mut bytes = vec![0u8; 80 * 1024];
        bytes[9..64].fill(0x5a);
        fs::write(&path, &bytes).unwrap();
        let said = describe_foreign_file(&path).unwrap();
        assert!(said.contains("never held a record"), "{said}");
        assert!(said.contains("half.redb"), "{said}");
        // Bytes past the header: it may be a damaged store, which is not said.
        bytes[40_000] = 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(describe_foreign_file(&path), None);
        // Any other file: nothing to say.
        fs::write(&path, b"hello").unwrap();
        assert_eq!(describe_foreign_file(&path), None);
    }
}
