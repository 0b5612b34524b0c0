//! Reading a `FILE|-` argument and printing one-line errors.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use crate::exit;

/// Reads the whole input: stdin for `None` or `-`, else the file. On failure
/// prints one line naming the path and returns exit code 66 (EX_NOINPUT).
pub(crate) fn read_input(file: Option<&Path>) -> Result<Vec<u8>, ExitCode> {
    let mut buf = Vec::new();
    match file {
        None => read_stdin(&mut buf)?,
        Some(p) if p.as_os_str() == "-" => read_stdin(&mut buf)?,
        Some(p) => {
            buf = std::fs::read(p).map_err(|e| {
                error_line(&format!("cannot read {}: {e}", p.display()));
                ExitCode::from(exit::NO_INPUT)
            })?;
        }
    }
    Ok(buf)
}

fn read_stdin(buf: &mut Vec<u8>) -> Result<(), ExitCode> {
    std::io::stdin().lock().read_to_end(buf).map_err(|e| {
        error_line(&format!("cannot read standard input: {e}"));
        ExitCode::from(exit::NO_INPUT)
    })?;
    Ok(())
}

/// Prints `idemkit: MESSAGE` on stderr as exactly one line: control characters
/// (which a member name in a pointer may hold) are escaped.
pub(crate) fn error_line(message: &str) {
    let mut line = String::from("idemkit: ");
    for c in message.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    eprintln!("{line}");
}

/// Writes `bytes` to stdout and flushes; exit 74 if that fails.
pub(crate) fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            error_line(&format!("cannot write standard output: {e}"));
            ExitCode::from(exit::IO_ERR)
        }
    }
}
