//! The raw durable-write floor of a disk: `write(128 bytes) + fdatasync`.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::time::Instant;

use crate::stats::Latencies;

/// The size of one raw record.
pub const RECORD: usize = 128;

/// How the 128 bytes are written before each `fdatasync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Appended to the file (the file grows, so the sync also commits its size:
    /// what a write-ahead log does).
    Append,
    /// Overwritten in place in a preallocated file (data only: the cheapest
    /// durable write the disk offers).
    Overwrite,
}

/// A file that takes 128-byte durable writes.
#[derive(Debug)]
pub struct RawLog {
    file: File,
    mode: Mode,
    offset: u64,
    buf: [u8; RECORD],
}

/// Bytes preallocated for [`Mode::Overwrite`] (it wraps around).
const OVERWRITE_SPAN: u64 = 1 << 20;

impl RawLog {
    /// Creates (truncating) `path`.
    ///
    /// # Errors
    ///
    /// The file could not be created or preallocated.
    pub fn create(path: &Path, mode: Mode) -> std::io::Result<RawLog> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut options = OpenOptions::new();
        options.create_new(true).read(true);
        match mode {
            Mode::Append => options.append(true),
            Mode::Overwrite => options.write(true),
        };
        let file = options.open(path)?;
        if mode == Mode::Overwrite {
            file.write_all_at(&vec![0u8; OVERWRITE_SPAN as usize], 0)?;
            file.sync_all()?;
        }
        Ok(RawLog {
            file,
            mode,
            offset: 0,
            buf: [0x5a; RECORD],
        })
    }

    /// One durable 128-byte write: `write` then `File::sync_data` (fdatasync on Linux).
    ///
    /// # Errors
    ///
    /// The write or the sync failed.
    pub fn write_sync(&mut self) -> std::io::Result<()> {
        self.buf[..8].copy_from_slice(&self.offset.to_le_bytes());
        match self.mode {
            Mode::Append => self.file.write_all(&self.buf)?,
            Mode::Overwrite => self
                .file
                .write_all_at(&self.buf, self.offset % OVERWRITE_SPAN)?,
        }
        self.offset += RECORD as u64;
        self.file.sync_data()
    }

    /// `n` timed durable writes.
    ///
    /// # Errors
    ///
    /// A write or sync failed.
    pub fn measure(&mut self, n: usize) -> std::io::Result<Latencies> {
        let mut lat = Latencies::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            self.write_sync()?;
            lat.record(t.elapsed());
        }
        Ok(lat)
    }
}
