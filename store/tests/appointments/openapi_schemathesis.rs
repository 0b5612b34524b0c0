//! Schemathesis (`--checks all`) against the running appointments service with
//! its OpenAPI document: no server error, no answer the document does not
//! describe, no negative request accepted and no schema-valid request refused,
//! other than the two refusals the HTTP contract itself implies, which
//! `tests/schemathesis/hooks.py` accepts by name and nothing else (a generated
//! key repeated with another body → 422 `idempotency-key-reused`; the demo
//! authentication takes any bearer token as a tenant).
//!
//! Schemathesis comes from PyPI, pinned to [`SCHEMATHESIS_VERSION`];
//! `scripts/test-all.sh` installs it into `tools/schemathesis/` (a venv) when
//! it is missing. `IDEMKIT_SCHEMATHESIS` names another executable. Without one
//! the test fails and says how to install it: it is never skipped.
#![cfg(feature = "axum")]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::Service;

/// The schemathesis release this test is written against (scripts/test-all.sh
/// installs exactly this one).
const SCHEMATHESIS_VERSION: &str = "4.32.5";

/// Test cases per API operation and phase: enough to reach every documented
/// answer, few enough that the run stays well under two minutes on two cores.
const MAX_EXAMPLES: &str = "40";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("store/ has a parent")
        .to_path_buf()
}

fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("IDEMKIT_SCHEMATHESIS") {
        return PathBuf::from(path);
    }
    let venv = repo_root().join("tools/schemathesis/bin/schemathesis");
    assert!(
        venv.is_file(),
        "schemathesis {SCHEMATHESIS_VERSION} is not installed at {}: run scripts/test-all.sh, or \
         `python3 -m venv tools/schemathesis && tools/schemathesis/bin/pip install \
         schemathesis=={SCHEMATHESIS_VERSION}`, or set IDEMKIT_SCHEMATHESIS",
        venv.display()
    );
    venv
}

#[test]
fn schemathesis_finds_nothing_the_openapi_document_does_not_describe() {
    let bin = schemathesis();
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run schemathesis --version");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.contains(SCHEMATHESIS_VERSION),
        "schemathesis {SCHEMATHESIS_VERSION} expected, found {version:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let store = Path::new(env!("CARGO_MANIFEST_DIR"));
    let document = store.join("examples/appointments/openapi.json");
    let hooks = store.join("tests/schemathesis/hooks.py");
    let output = Command::new(&bin)
        .env("SCHEMATHESIS_HOOKS", &hooks)
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .arg("run")
        .arg(&document)
        .args(["--url", &format!("http://{}", service.addr)])
        .args(["--checks", "all"])
        // Replaced by the narrower checks of hooks.py (see the module docs).
        .args(["--exclude-checks", "positive_data_acceptance,ignored_auth"])
        .args(["--header", "Authorization: Bearer schemathesis-tenant"])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--seed", "20261201"])
        // One worker: with two threads, hypothesis parses lambda sources with
        // `ast.parse` concurrently, which CPython before 3.11.8 (this machine's
        // 3.11.7) can fail with "AST constructor recursion depth mismatch"
        // (CPython gh-106905): a crash of the tool, not a finding.
        .args(["--workers", "1"])
        .args(["--request-timeout", "10"])
        .args(["--warnings", "off"])
        // Test values only: show the keys and tokens that failed.
        .args(["--output-sanitize", "false"])
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        output.status.success(),
        "schemathesis reported problems (exit {:?}); its report is above",
        output.status.code()
    );
    // The run really exercised the service: every documented operation was
    // tested, and schemathesis itself says it found nothing.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&document).unwrap()).unwrap();
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(operations, 6);
    let tested = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Tested: "))
        .and_then(|n| n.trim().parse::<usize>().ok());
    assert_eq!(
        tested,
        Some(operations),
        "every documented operation was tested"
    );
    assert!(
        stdout.contains("No issues found"),
        "schemathesis found issues"
    );
}
