//! The binary's log: the `tracing` events of the library and of the gateways
//! (an upstream that could not be reached, an outcome that could not be
//! recorded, a GC round that failed, a store reopened after an I/O error), one
//! line each on stderr. [`LOG_VAR`] sets the level: `error`, `warn` (the
//! default), `info`, `debug`, `trace` or `off`.

use tracing::Level;

/// The environment variable naming the level.
pub(crate) const LOG_VAR: &str = "IDEMKIT_LOG";

/// Installs the log at the level [`LOG_VAR`] names; an unknown level is
/// refused with the ones there are.
pub(crate) fn init() -> Result<(), String> {
    let level = match std::env::var(LOG_VAR) {
        Err(_) => Some(Level::WARN),
        Ok(value) => level(&value).ok_or_else(|| {
            format!("{LOG_VAR}={value:?}: expected error, warn, info, debug, trace or off")
        })?,
    };
    if let Some(level) = level {
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_target(false)
            // A line that cannot be written (stderr a file on a full disk, or
            // past the process's file-size limit) is lost, never reported
            // with `eprintln!`, which panics when stderr fails: the request
            // logging it would die with it.
            .log_internal_errors(false)
            .init();
    }
    Ok(())
}

/// Writes `line` and a newline to stderr as `eprintln!` does, except that a
/// stderr that cannot take it (a file on a full disk) loses the line instead
/// of panicking: an operator's request (a resolve, a login) must not die, or
/// stop between its write and its audit entry, because its log line could not
/// be written.
#[allow(
    dead_code,
    reason = "the appointments example shares this module and writes no such lines"
)]
pub(crate) fn line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The level `value` names (`None`: off), in any case.
fn level(value: &str) -> Option<Option<Level>> {
    Some(Some(match value.trim().to_ascii_lowercase().as_str() {
        "off" => return Some(None),
        "error" => Level::ERROR,
        "warn" => Level::WARN,
        "info" => Level::INFO,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => return None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_named_in_any_case_and_off_turns_the_log_off() {
        assert_eq!(level("warn"), Some(Some(Level::WARN)));
        assert_eq!(level(" Debug "), Some(Some(Level::DEBUG)));
        assert_eq!(level("OFF"), Some(None));
        assert_eq!(level("verbose"), None);
    }
}
