//! How `idemkit exec` starts CMD so that CMD never outlives it.
//!
//! On unix CMD runs in a process group of its own (so it and whatever it starts
//! can be signalled together, and a terminal's Ctrl-C reaches it only through
//! exec), and three things tie that group to exec's life:
//!
//! - **Parent-death signal (Linux).** CMD is started through a hidden
//!   subcommand of this binary, `__exec-child`, which sets `PR_SET_PDEATHSIG` to
//!   SIGKILL on itself, checks that its parent is still exec (if exec died in
//!   between, nobody would deliver the signal: it exits instead), and then
//!   replaces itself with CMD (`execve` keeps the death signal; a set-user-ID or
//!   file-capability CMD loses it, as the kernel clears it then).
//! - **A reaper for the group.** `__exec-reaper`, a second tiny child in a group
//!   of its own, reads a pipe whose only writer is exec. When exec dies, even by
//!   SIGKILL, the kernel closes that pipe, and the reaper kills CMD's whole
//!   group with SIGKILL: the processes CMD started die too. When exec ends
//!   normally it tells the reaper to stand down first.
//! - **Forwarded signals.** SIGTERM, SIGINT and SIGHUP sent to exec are sent on
//!   to CMD's group; a second one sends SIGKILL. exec then records CMD's outcome
//!   (a command killed by a signal is a failure, handled per --on-failure) and
//!   kills what is left of the group before it exits.
//!
//! No `unsafe`: rustix and signal-hook wrap the system calls.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use clap::Args;

/// Where PATH lookup goes when PATH is unset (as `execvp` does).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Finds the file `name` names, as `execvp` would: a name with a `/` is a path,
/// any other is looked up in PATH. Checked before anything is started, so a
/// command that cannot run is reported (exit 127) and its claim released.
pub(crate) fn resolve_program(name: &str) -> io::Result<PathBuf> {
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the command name is empty",
        ));
    }
    if name.contains('/') {
        let path = PathBuf::from(name);
        return if is_executable_file(&path) {
            Ok(path)
        } else if path.exists() {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "not an executable file",
            ))
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, "no such file"))
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    std::env::split_paths(&path_var)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".").join(name)
            } else {
                dir.join(name)
            }
        })
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not found in PATH"))
}

#[cfg(unix)]
fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(not(unix))]
fn is_executable_file(path: &Path) -> bool {
    path.is_file()
}

/// CMD, started, with what ties it to exec.
pub(crate) struct Running {
    /// The process exec waits for (on Linux `__exec-child`, which became CMD).
    pub(crate) child: Child,
    #[cfg(unix)]
    group: rustix::process::Pid,
    #[cfg(unix)]
    reaper: Option<Reaper>,
    #[cfg(unix)]
    forwarder: Option<Forwarder>,
}

#[cfg(unix)]
struct Reaper {
    child: Child,
}

#[cfg(unix)]
struct Forwarder {
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<Option<i32>>,
}

/// Starts CMD (`program` resolved to `resolved`, then `args`) with its stdout
/// piped to exec, its stderr exec's, and its stdin exec's unless that is a
/// terminal (a process outside the terminal's foreground group that reads it is
/// stopped, and exec would wait forever): then `/dev/null`.
pub(crate) fn spawn(program: &str, resolved: &Path, args: &[String]) -> io::Result<Running> {
    spawn_unix_or_plain(program, resolved, args)
}

fn stdin_for_cmd() -> Stdio {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        Stdio::null()
    } else {
        Stdio::inherit()
    }
}

#[cfg(not(unix))]
fn spawn_unix_or_plain(_program: &str, resolved: &Path, args: &[String]) -> io::Result<Running> {
    let child = Command::new(resolved)
        .args(args)
        .stdin(stdin_for_cmd())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    Ok(Running { child })
}

/// This binary, to start the hidden subcommands. On Linux `/proc/self/exe`,
/// which works even when the file was replaced or deleted since exec started.
#[cfg(unix)]
fn this_binary() -> io::Result<PathBuf> {
    if cfg!(target_os = "linux") {
        Ok(PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe()
    }
}

#[cfg(unix)]
fn spawn_unix_or_plain(program: &str, resolved: &Path, args: &[String]) -> io::Result<Running> {
    use std::os::unix::process::CommandExt;

    // Registered before CMD starts, so a signal that arrives in between is queued
    // and forwarded once the group exists. A failure only loses the forwarding.
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| {
        eprintln!(
            "idemkit: cannot catch SIGTERM/SIGINT/SIGHUP ({e}); they will stop exec without stopping the command first"
        );
    })
    .ok();

    let mut command = if cfg!(target_os = "linux") {
        let mut c = Command::new(this_binary()?);
        c.arg0("idemkit")
            .arg("__exec-child")
            .arg("--parent")
            .arg(std::process::id().to_string())
            .arg("--program")
            .arg(resolved)
            .arg("--")
            .arg(program)
            .args(args);
        c
    } else {
        let mut c = Command::new(resolved);
        c.arg0(program).args(args);
        c
    };
    let child = command
        .process_group(0)
        .stdin(stdin_for_cmd())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    // The group's id is its leader's pid: the child's.
    let group = rustix::process::Pid::from_child(&child);
    let reaper = spawn_reaper(group)
        .map_err(|e| {
            eprintln!(
                "idemkit: cannot start the reaper of the command's process group ({e}); if exec is killed, processes the command started may survive it"
            );
        })
        .ok();
    let forwarder = signals.map(|signals| forward_signals(signals, group));
    Ok(Running {
        child,
        group,
        reaper,
        forwarder,
    })
}

#[cfg(unix)]
fn spawn_reaper(group: rustix::process::Pid) -> io::Result<Reaper> {
    use std::os::unix::process::CommandExt;
    let child = Command::new(this_binary()?)
        .arg0("idemkit")
        .arg("__exec-reaper")
        .arg("--group")
        .arg(group.as_raw_nonzero().get().to_string())
        // Its own group: neither a terminal's Ctrl-C nor a kill of CMD's group
        // reaches it.
        .process_group(0)
        // The pipe whose closing says exec is gone (std makes exec's end
        // close-on-exec, so no other process holds it).
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    Ok(Reaper { child })
}

/// Sends the first SIGTERM/SIGINT/SIGHUP on to the group, SIGKILL for any
/// later one; answers the first signal received, if any, when closed.
#[cfg(unix)]
fn forward_signals(
    mut signals: signal_hook::iterator::Signals,
    group: rustix::process::Pid,
) -> Forwarder {
    let handle = signals.handle();
    let thread = std::thread::spawn(move || {
        let mut first = None;
        for raw in signals.forever() {
            let (signal, what) = match (first, rustix_signal(raw)) {
                (None, Some(signal)) => (signal, "sent it on to"),
                _ => (rustix::process::Signal::KILL, "sent SIGKILL to"),
            };
            first.get_or_insert(raw);
            eprintln!("idemkit: got signal {raw}: {what} the command's process group");
            if let Err(e) = rustix::process::kill_process_group(group, signal) {
                eprintln!("idemkit: signalling the command's process group failed: {e}");
            }
        }
        first
    });
    Forwarder { handle, thread }
}

#[cfg(unix)]
fn rustix_signal(raw: i32) -> Option<rustix::process::Signal> {
    use rustix::process::Signal;
    match raw {
        signal_hook::consts::SIGTERM => Some(Signal::TERM),
        signal_hook::consts::SIGINT => Some(Signal::INT),
        signal_hook::consts::SIGHUP => Some(Signal::HUP),
        _ => None,
    }
}

impl Running {
    /// Whether processes of CMD's process group are still running after CMD
    /// was waited for: ones it started and left behind.
    pub(crate) fn group_still_running(&self) -> bool {
        #[cfg(unix)]
        {
            // EPERM: there are processes, only not ours to signal.
            !matches!(
                rustix::process::test_kill_process_group(self.group),
                Err(rustix::io::Errno::SRCH)
            )
        }
        #[cfg(not(unix))]
        {
            false
        }
    }

    /// After CMD was waited for: stops forwarding signals and stands the reaper
    /// down. If exec was told to stop by a signal, what is left of CMD's group is
    /// killed (exec was asked to stop, so nothing it started stays behind);
    /// otherwise processes CMD left running are left alone. Answers the signal
    /// exec received, if any.
    pub(crate) fn finish(self) -> Option<i32> {
        #[cfg(unix)]
        {
            let signalled = self.forwarder.and_then(|f| {
                f.handle.close();
                f.thread.join().ok().flatten()
            });
            if signalled.is_some() {
                // ESRCH (the group is already gone) is the usual answer.
                let _ =
                    rustix::process::kill_process_group(self.group, rustix::process::Signal::KILL);
            }
            if let Some(mut reaper) = self.reaper {
                if let Some(mut pipe) = reaper.child.stdin.take() {
                    use std::io::Write;
                    // One byte: stand down. (A failure means it is gone already.)
                    let _ = pipe.write_all(b"x");
                }
                let _ = reaper.child.wait();
            }
            signalled
        }
        #[cfg(not(unix))]
        {
            None
        }
    }
}

/// Internal: how `idemkit exec` starts CMD on Linux. Not for direct use.
#[derive(Args, Debug)]
pub(crate) struct ChildArgs {
    /// The pid of the `idemkit exec` that started this process.
    #[arg(long, value_name = "PID")]
    parent: i32,
    /// The resolved file to execute.
    #[arg(long, value_name = "PATH")]
    program: PathBuf,
    /// CMD's argv (the first is its name, as given to exec).
    #[arg(last = true, required = true)]
    argv: Vec<OsString>,
}

/// Sets the parent-death signal, checks the parent, becomes CMD. Returns (exit
/// 127) only if CMD could not be executed; exits at once (75) if exec is
/// already gone.
#[cfg(unix)]
pub(crate) fn run_child(args: ChildArgs) -> std::process::ExitCode {
    use std::os::unix::process::CommandExt;

    #[cfg(target_os = "linux")]
    {
        if let Err(e) =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        {
            // The reaper still kills the group if exec dies; running without the
            // signal beats leaving exec's claim to an outcome that never ran.
            eprintln!("idemkit: cannot set the command's parent-death signal: {e}");
        }
        // exec may have died between starting this process and the prctl; then
        // the signal will never come. Its claim's lease expires as for a crash.
        let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
        if parent != Some(args.parent) {
            eprintln!(
                "idemkit: exec (pid {}) ended before the command started; not running it",
                args.parent
            );
            return std::process::ExitCode::from(crate::exit::TEMP_FAIL);
        }
    }
    let Some((argv0, rest)) = args.argv.split_first() else {
        return std::process::ExitCode::from(crate::exit::USAGE);
    };
    let error = Command::new(&args.program).arg0(argv0).args(rest).exec();
    eprintln!(
        "idemkit: cannot run {}: {error}",
        args.program.to_string_lossy()
    );
    std::process::ExitCode::from(127)
}

/// Internal: kills a process group when `idemkit exec` dies. Not for direct use.
#[derive(Args, Debug)]
pub(crate) struct ReaperArgs {
    /// The process group of exec's CMD.
    #[arg(long, value_name = "PGID")]
    group: i32,
}

/// Waits on stdin: a byte means exec ended normally (stand down); end of file
/// without one means exec died, so CMD's group is killed.
#[cfg(unix)]
pub(crate) fn run_reaper(args: &ReaperArgs) -> std::process::ExitCode {
    use std::io::Read;
    // Never 0 or 1 (the caller's group, every process): a group id is a pid > 1.
    let group = match rustix::process::Pid::from_raw(args.group) {
        Some(pid) if pid != rustix::process::Pid::INIT => pid,
        _ => {
            eprintln!("idemkit: __exec-reaper: invalid --group {}", args.group);
            return std::process::ExitCode::from(crate::exit::USAGE);
        }
    };
    let mut byte = [0u8; 1];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => return std::process::ExitCode::from(crate::exit::OK),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // ESRCH: the group is gone already.
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    std::process::ExitCode::from(crate::exit::OK)
}
