//! `idemkit canonicalize [--profile strict|rfc8785] [--max-bytes N] [FILE|-]`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use idemkit::core::json::{CanonicalizeOptions, Profile, Sink, canonicalize_to};

use crate::exit;
use crate::input::{error_line, read_input};

/// The canonicalization profile on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ProfileArg {
    /// RFC 8785 output; numbers must survive exactly, duplicates rejected.
    Strict,
    /// Plain RFC 8785: numbers are rounded to the nearest double.
    Rfc8785,
}

impl From<ProfileArg> for Profile {
    fn from(p: ProfileArg) -> Self {
        match p {
            ProfileArg::Strict => Profile::Strict,
            ProfileArg::Rfc8785 => Profile::Rfc8785,
        }
    }
}

/// Print the RFC 8785 (JCS) canonical form of a JSON document.
///
/// Prints exactly the canonical bytes (no trailing newline) and exits 0. A
/// rejected document prints one line on stderr with the kind, byte offset and
/// JSON Pointer and exits 65; an unreadable file exits 66. There is no size
/// limit unless `--max-bytes` sets one (a larger input is rejected with
/// `json-input-too-large`, exit 65).
///
/// Examples:
///   echo '{"b": 1.0, "a": [1e0, "\u0061"]}' | idemkit canonicalize
///   idemkit canonicalize --profile rfc8785 request.json
///   idemkit canonicalize - < request.json | sha256sum
///   idemkit canonicalize --max-bytes 1048576 upload.json
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct CanonicalizeArgs {
    /// Which rules apply.
    #[arg(long, value_enum, default_value = "strict")]
    profile: ProfileArg,
    /// Reject inputs longer than N bytes (default: no limit).
    #[arg(long, value_name = "N")]
    max_bytes: Option<usize>,
    /// The JSON file; `-` or nothing reads standard input.
    file: Option<PathBuf>,
}

pub(crate) fn run(args: &CanonicalizeArgs) -> ExitCode {
    let input = match read_input(args.file.as_deref()) {
        Ok(i) => i,
        Err(code) => return code,
    };
    // A file or pipe on the command line is the operator's own: no limit unless
    // asked for (the network-facing limits live in the middleware).
    let opts = CanonicalizeOptions::default()
        .profile(args.profile.into())
        .max_input_len(args.max_bytes.unwrap_or(usize::MAX));
    // Streamed: the canonical bytes are written as they are made, so the
    // output is never held in memory next to the input. The whole input is
    // validated first, so a rejected one prints nothing on stdout.
    let mut sink = StdoutSink {
        out: std::io::stdout().lock(),
        error: None,
    };
    if let Err(e) = canonicalize_to(&input, &opts, &mut sink) {
        error_line(&format!("rejected JSON: {e} [{}]", e.code()));
        return ExitCode::from(exit::DATA_ERR);
    }
    let flushed = match sink.error.take() {
        Some(e) => Err(e),
        None => sink.out.flush(),
    };
    match flushed {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            error_line(&format!("cannot write standard output: {e}"));
            ExitCode::from(exit::IO_ERR)
        }
    }
}

/// Standard output as a [`Sink`]: keeps the first write error and drops what
/// comes after it.
struct StdoutSink<'a> {
    out: std::io::StdoutLock<'a>,
    error: Option<std::io::Error>,
}

impl Sink for StdoutSink<'_> {
    fn write(&mut self, bytes: &[u8]) {
        if self.error.is_none()
            && let Err(e) = self.out.write_all(bytes)
        {
            self.error = Some(e);
        }
    }
}
