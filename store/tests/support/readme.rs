//! README.md's snippets as tests see them: a section's fenced blocks, shell blocks
//! run as written (with `idemkit` on `PATH` and the README's addresses replaced by
//! the test's), and the quick start example's executable (started with
//! [`super::mcp::Spawned`], which reads the address it prints).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// README.md at the repository's root.
pub(crate) fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The text of the section headed `## {heading}`, up to the next `## ` heading.
pub(crate) fn section(heading: &str) -> String {
    let readme = readme();
    let title = format!("## {heading}\n");
    let start = readme
        .find(&title)
        .unwrap_or_else(|| panic!("README.md has no section {title:?}"));
    let body = &readme[start + title.len()..];
    body[..body.find("\n## ").unwrap_or(body.len())].to_owned()
}

/// The contents of the fenced blocks of `lang` in `text`, in order.
pub(crate) fn blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```").expect("a closed fence");
        found.push(body[..end].to_owned());
        rest = &body[end + 3..];
    }
    found
}

/// The one block of `lang` in the section headed `heading` that contains `marker`.
pub(crate) fn block(heading: &str, lang: &str, marker: &str) -> String {
    let mut matching: Vec<String> = blocks(&section(heading), lang)
        .into_iter()
        .filter(|b| b.contains(marker))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "README.md, section {heading:?}: expected one ```{lang} block with {marker:?}"
    );
    matching.remove(0)
}

/// `text` with each `(from, to)` replaced; `from` must occur, so a snippet that
/// moved to another address fails here instead of reaching a stranger's port.
pub(crate) fn replaced(text: &str, replacements: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (from, to) in replacements {
        assert!(
            text.contains(from),
            "{from:?} is not in the snippet:\n{text}"
        );
        text = text.replace(from, to);
    }
    text
}

/// A `sh` command for `script` in `dir`, with this build's `idemkit` first on `PATH`.
pub(crate) fn sh(dir: &Path, script: &str) -> Command {
    let bin = dir.join("bin");
    if !bin.exists() {
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idemkit"), bin.join("idemkit")).unwrap();
    }
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let mut command = Command::new("sh");
    command
        .args(["-e", "-c", script])
        .current_dir(dir)
        .env("PATH", path);
    command
}

/// Runs `script` with [`sh`]; its output, after checking it exited 0.
pub(crate) fn run_sh(dir: &Path, script: &str) -> Output {
    let out = sh(dir, script).output().unwrap();
    assert!(
        out.status.success(),
        "the README's snippet failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `store/examples/quickstart.rs`, built.
pub(crate) fn quickstart_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| super::build_example("quickstart", &[]))
}
