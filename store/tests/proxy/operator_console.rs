//! The operator console on the proxy's admin listener and as `idemkit
//! console`: an Unknown record left by a crash is seen and settled in a real
//! browser (headless Chromium driven by store/tests/console/browser.mjs), and
//! the client's next retry replays the operator's answer; the session,
//! CSRF and version rules are checked request by request.
#![cfg(feature = "axum")]

use crate::support;
use crate::support::idemkit_proxy as proxy_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use proxy_support::{ADMIN_TOKEN, ProxyProcess, killed_mid_request, post_json};
use support::{Reply, request};

const BODY: &[u8] = br#"{"amount":10,"request_id":"r-1"}"#;

/// The log reference of each Unknown record, by key.
fn unknown_log_ref(proxy: &ProxyProcess, key: &str) -> String {
    let listed = proxy.admin("GET", "/records?state=unknown", b"").json();
    let record = listed["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("{key} is Unknown: {listed}"));
    record["log_ref"].as_str().unwrap().to_owned()
}

/// store/tests/console, where the browser driver and playwright-core live.
fn console_tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console")
}

/// Where the browser test leaves its screenshots (under the target folder).
fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
}

fn chromium() -> String {
    let path = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: scripts/test-all.sh installs Debian's chromium (or set CHROMIUM)"
    );
    assert!(
        console_tests_dir()
            .join("node_modules/playwright-core")
            .exists(),
        "playwright-core is missing: scripts/test-all.sh runs npm ci in store/tests/console"
    );
    path
}

/// Runs the browser driver; its last stdout line is its JSON verdict.
fn browser(mode: &str, admin: SocketAddr, env: &[(&str, &str)]) -> serde_json::Value {
    let mut command = Command::new("node");
    command
        .arg(console_tests_dir().join("browser.mjs"))
        .env("MODE", mode)
        .env("CONSOLE_URL", format!("http://{admin}"))
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CHROMIUM", chromium())
        .env("SCREENSHOT_DIR", screenshot_dir())
        .stderr(Stdio::inherit());
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the browser driver failed: {stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn an_operator_settles_a_crashed_request_in_the_browser_and_the_retry_replays_it() {
    let (dir, upstream, proxy) = killed_mid_request(&["k-console", "k-stale"], BODY);
    let settled = unknown_log_ref(&proxy, "k-console");
    let stale = unknown_log_ref(&proxy, "k-stale");

    let verdict = browser(
        "test",
        proxy.admin,
        &[("UNKNOWN_LOG_REF", &settled), ("STALE_LOG_REF", &stale)],
    );
    assert_eq!(verdict["ok"], true, "{verdict}");
    let checks: Vec<&str> = verdict["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    for check in [
        "login_page_without_token",
        "wrong_token_refused",
        "login",
        "unknown_listed",
        "detail",
        "stale_refused",
        "forged_csrf_refused",
        "resolve_applied",
        "audit_shows_action",
    ] {
        assert!(checks.contains(&check), "{check} ran: {verdict}");
    }

    // The client's next retry gets the operator's answer, not a second call.
    let retry = post_json(
        proxy.addr,
        "/accounts/slow/withdraw",
        Some("k-console"),
        Some("acme"),
        BODY,
    );
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_eq!(retry.json()["id"], "bk_operator", "{retry:?}");
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    // The stale page changed nothing: the other operator's resolution holds,
    // so the retry runs again as a new attempt would.
    let after_stale = post_json(
        proxy.addr,
        "/accounts/slow/withdraw",
        Some("k-stale"),
        Some("acme"),
        BODY,
    );
    assert_eq!(
        after_stale.status, 504,
        "released, so sent again: {after_stale:?}"
    );
    assert_eq!(
        upstream.calls("slow"),
        3,
        "only the released key went upstream again"
    );

    // The audit log beside the store holds both resolutions, with the note.
    let audit = std::fs::read_to_string(dir.path().join("proxy.audit.jsonl")).unwrap();
    let entries: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_dana = entries
        .iter()
        .find(|e| e["log_ref"] == settled.as_str())
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(by_dana["operator"], "Dana Operator");
    assert_eq!(by_dana["note"], "Confirmed with the provider by phone");
    assert_eq!(
        (&by_dana["from"], &by_dana["to"]),
        (&"unknown".into(), &"completed".into())
    );
    assert_eq!(by_dana["status"], 201);
    let by_other = entries
        .iter()
        .find(|e| e["log_ref"] == stale.as_str())
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(by_other["operator"], "someone else");
    assert_eq!(
        entries.len(),
        2,
        "the refused resolves wrote nothing: {audit}"
    );
    assert!(!audit.contains("k-console"), "no key in the audit log");

    for shot in ["list.png", "detail.png"] {
        let png = std::fs::read(screenshot_dir().join(shot)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{shot} is a PNG");
        // The docs show these: `IDEMKIT_UPDATE_SCREENSHOTS=1` regenerates them.
        if std::env::var_os("IDEMKIT_UPDATE_SCREENSHOTS").is_some() {
            let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/images");
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(docs.join(format!("console-{shot}")), png).unwrap();
        }
    }
}

/// A session's cookie and CSRF token, from a token login.
struct Login {
    cookie: String,
    csrf: String,
}

fn login(addr: SocketAddr, token: &str) -> Result<Login, Reply> {
    let form = format!("name=Sam+Ops&token={token}");
    let reply = request(
        addr,
        "POST",
        "/console/login",
        &[("Content-Type", b"application/x-www-form-urlencoded")],
        form.as_bytes(),
    )
    .unwrap();
    if reply.status != 303 {
        return Err(reply);
    }
    let set = reply.header("set-cookie").unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(attribute), "{set}");
    }
    // Served in plain HTTP (a loopback listener), so not `Secure`: a browser
    // would never send such a cookie back.
    assert!(!set.contains("Secure"), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = request(
        addr,
        "GET",
        "/console",
        &[("Cookie", cookie.as_bytes())],
        b"",
    )
    .unwrap();
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.body).unwrap();
    let csrf = html
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    Ok(Login { cookie, csrf })
}

fn resolve_with(addr: SocketAddr, id: &str, headers: &[(&str, &[u8])], version: &str) -> Reply {
    let body = serde_json::json!({
        "applied": false, "note": "checked: never reached the provider", "version": version,
    });
    let mut all: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
    all.extend_from_slice(headers);
    request(
        addr,
        "POST",
        &format!("/console/api/records/{id}/resolve"),
        &all,
        body.to_string().as_bytes(),
    )
    .unwrap()
}

#[test]
fn the_console_serves_nothing_but_its_login_without_a_token_and_refuses_forged_or_stale_changes() {
    let (_dir, _upstream, proxy) = killed_mid_request(&["k-rules"], BODY);
    let admin = proxy.admin;
    let get =
        |path: &str, headers: &[(&str, &[u8])]| request(admin, "GET", path, headers, b"").unwrap();

    // Without a token or session: the login page (and its stylesheet) only.
    let page = get("/console", &[]);
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/console/login"))
    );
    let login_page = get("/console/login", &[]);
    assert_eq!(login_page.status, 200);
    let csp = login_page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(login_page.header("x-frame-options"), Some("DENY"));
    assert_eq!(get("/console/assets/console.css", &[]).status, 200);
    for path in [
        "/console/assets/console.js",
        "/console/api/records",
        "/console/api/audit",
        "/console/api/metrics",
    ] {
        assert_eq!(get(path, &[]).status, 401, "{path}");
    }
    assert!(login(admin, "not-the-admin-token-but-32-bytes!").is_err());

    // With the token as a bearer: the API answers, bodies never in the list.
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let listed = get(
        "/console/api/records",
        &[("Authorization", bearer.as_bytes())],
    )
    .json();
    let record = listed["records"][0].clone();
    assert_eq!(
        (&record["key"], &record["state"]),
        (&"k-rules".into(), &"unknown".into())
    );
    assert_eq!(record["reason"], "crash");
    assert_eq!(record["told"]["problem"], "outcome-uncertain");
    let id = record["id"].as_str().unwrap().to_owned();
    let version = record["version"].as_str().unwrap().to_owned();

    // A session's change needs its CSRF token, from this origin.
    let session = login(admin, ADMIN_TOKEN).unwrap_or_else(|r| panic!("{r:?}"));
    let cookie = session.cookie.as_bytes();
    assert_eq!(
        resolve_with(admin, &id, &[("Cookie", cookie)], &version).status,
        403
    );
    let forged = resolve_with(
        admin,
        &id,
        &[("Cookie", cookie), ("X-CSRF-Token", b"forged")],
        &version,
    );
    assert_eq!(forged.status, 403);
    let csrf = session.csrf.as_bytes();
    let foreign = resolve_with(
        admin,
        &id,
        &[
            ("Cookie", cookie),
            ("X-CSRF-Token", csrf),
            ("Origin", b"http://evil.example"),
        ],
        &version,
    );
    assert_eq!(foreign.status, 403);
    let no_note = request(
        admin,
        "POST",
        &format!("/console/api/records/{id}/resolve"),
        &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
        format!(r#"{{"applied":false,"note":"  ","version":"{version}"}}"#).as_bytes(),
    )
    .unwrap();
    assert_eq!(no_note.status, 400, "a note is required");
    let detail = get(&format!("/console/api/records/{id}"), &[("Cookie", cookie)]).json();
    assert_eq!(
        detail["state"], "unknown",
        "nothing refused changed the record"
    );

    // A version other than the current one is refused as stale.
    let stale = resolve_with(
        admin,
        &id,
        &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
        "0",
    );
    assert_eq!(
        (stale.status, &stale.json()["changed"]),
        (409, &true.into())
    );
    let settled = resolve_with(
        admin,
        &id,
        &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
        &version,
    );
    assert_eq!(settled.status, 200, "{settled:?}");
    assert_eq!(settled.json()["state"], "released");
    let again = resolve_with(
        admin,
        &id,
        &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
        &version,
    );
    assert_eq!(again.status, 409, "the page's version is stale now");

    let audit = get("/console/api/audit", &[("Cookie", cookie)]).json();
    let entry = &audit["entries"][0];
    assert_eq!(
        (&entry["operator"], &entry["to"]),
        (&"Sam Ops".into(), &"released".into())
    );

    // Logging out ends the session.
    let out = request(
        admin,
        "POST",
        "/console/logout",
        &[("Cookie", cookie), ("X-CSRF-Token", csrf)],
        b"",
    )
    .unwrap();
    assert_eq!(out.status, 204);
    assert_eq!(
        get("/console/api/records", &[("Cookie", cookie)]).status,
        401
    );
}

/// `idemkit console` serving a store until dropped.
struct ConsoleProcess {
    child: Child,
    addr: SocketAddr,
}

impl Drop for ConsoleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_console(db: &Path, token_file: &Path) -> ConsoleProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["console", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .arg("--token-file")
        .arg(token_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    // Owned by the guard from here: killed and waited for however this ends.
    let mut console = ConsoleProcess {
        child,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let printed = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("idemkit console: http://")
                .map(|url| url.trim_end_matches("/console").parse().unwrap())
        });
    console.addr = printed.expect("idemkit console printed its address");
    console
}

#[test]
fn idemkit_console_settles_an_unknown_record_of_a_redb_file_and_audits_it_beside_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    // `exec`-style records left Unknown by their worker: inv-42, and six more
    // over two tenants for paging through a filter.
    {
        use idemkit::core::machine::Policy;
        use idemkit::core::{Fingerprint, IdempotencyKey, Scope};
        use idemkit::store::Claim;
        let store = idemkit::open(&db).unwrap();
        let unknown = |tenant: &str, key: &str, why: &str| {
            let scope = Scope::new(tenant, "invoice.send").unwrap();
            let key = IdempotencyKey::new(key).unwrap();
            let Claim::Execute(guard) = store
                .claim(
                    &scope,
                    &key,
                    Fingerprint::from_bytes([1; 32]),
                    "worker",
                    &Policy::default(),
                )
                .unwrap()
            else {
                panic!("a new key executes");
            };
            guard.mark_unknown(why).unwrap();
        };
        unknown("acme", "inv-42", "the mail server timed out");
        for n in 0..6 {
            let tenant = if n % 2 == 0 { "globex" } else { "initech" };
            unknown(tenant, &format!("batch-{n}"), "exit status 1");
        }
    }
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, format!("{ADMIN_TOKEN}\n")).unwrap();
    let console = start_console(&db, &token_file);

    let session = login(console.addr, ADMIN_TOKEN).unwrap_or_else(|r| panic!("{r:?}"));
    let cookie = session.cookie.as_bytes();
    let listed = request(
        console.addr,
        "GET",
        "/console/api/records?q=inv-42",
        &[("Cookie", cookie)],
        b"",
    )
    .unwrap()
    .json();
    let record = &listed["records"][0];
    assert_eq!(
        record["reason"], "marked by worker: the mail server timed out",
        "{listed}"
    );
    let none = request(
        console.addr,
        "GET",
        "/console/api/records?tenant=other",
        &[("Cookie", cookie)],
        b"",
    )
    .unwrap()
    .json();
    assert_eq!(
        none["records"].as_array().unwrap().len(),
        0,
        "filtered by tenant"
    );
    let settled = resolve_with(
        console.addr,
        record["id"].as_str().unwrap(),
        &[
            ("Cookie", cookie),
            ("X-CSRF-Token", session.csrf.as_bytes()),
        ],
        record["version"].as_str().unwrap(),
    );
    assert_eq!(settled.status, 200, "{settled:?}");
    drop(console);

    let audit = std::fs::read_to_string(dir.path().join("ops.audit.jsonl")).unwrap();
    assert!(audit.contains("\"operator\":\"Sam Ops\""), "{audit}");
    let show = support::idemkit(
        &db,
        &[
            "show",
            "--tenant",
            "acme",
            "--operation",
            "invoice.send",
            "--key",
            "inv-42",
        ],
    );
    assert!(
        String::from_utf8_lossy(&show.stdout).contains("released"),
        "{show:?}"
    );
}
