//! Shared by the `idemkit mcp` tests: the MCP servers and clients of
//! store/tests/mcp (the official SDKs, installed by scripts/test-all.sh), the
//! gateway process, and the admin listener.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Reply, request};

/// The admin token of every test gateway (the admin listener wants 32 bytes or more).
pub(crate) const ADMIN_TOKEN: &str = "mcp-test-admin-token-0123456789abcdef";

/// The key every scenario of store/tests/mcp sends for `marker`.
pub(crate) fn key_of(marker: &str) -> String {
    format!("{marker}-key")
}

/// store/tests/mcp.
pub(crate) fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: scripts/test-all.sh installs the MCP SDKs (npm ci in store/tests/mcp, \
         the Python client into tools/mcp-python)",
        path.display()
    );
    path
}

/// Node 22 from store/tests/mcp (npm `node`): the SDKs and the conformance suite run on it.
pub(crate) fn node() -> PathBuf {
    installed(mcp_dir().join("node_modules/node/bin/node"))
}

/// The venv holding the Python SDK's client.
pub(crate) fn python() -> PathBuf {
    installed(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/mcp-python/bin/python"))
}

/// Which SDK serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sdk {
    /// `@modelcontextprotocol/sdk` 1.x: revision 2025-11-25, sessions.
    V1,
    /// `@modelcontextprotocol/server` 2.x: 2026-07-28, and 2025 clients statelessly.
    V2,
}

/// Which client runs a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientKind {
    /// `@modelcontextprotocol/sdk` 1.x.
    V1,
    /// `@modelcontextprotocol/client` 2.x, version negotiation `auto`.
    V2,
    /// PyPI `mcp` 2.x, mode `auto`.
    Python,
}

/// An MCP server of store/tests/mcp/server.mjs over HTTP; killed when dropped.
pub(crate) struct McpServer {
    child: Child,
    sdk: Sdk,
    pub(crate) url: String,
    pub(crate) port: u16,
    pub(crate) count_file: PathBuf,
}

impl McpServer {
    /// Starts `sdk`'s server counting executions into `dir/executions`.
    pub(crate) fn start(sdk: Sdk, dir: &Path) -> McpServer {
        McpServer::start_on(sdk, dir, 0)
    }

    fn start_on(sdk: Sdk, dir: &Path, port: u16) -> McpServer {
        let count_file = dir.join("executions");
        let mut child = Command::new(node())
            .arg(mcp_dir().join("server.mjs"))
            .arg(match sdk {
                Sdk::V1 => "v1",
                Sdk::V2 => "v2",
            })
            .arg("http")
            .env("COUNT_FILE", &count_file)
            .env("PORT", port.to_string())
            .current_dir(mcp_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the MCP server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next()
            .expect("the server printed its address")
            .expect("read stdout");
        let url = line
            .rsplit(' ')
            .next()
            .expect("an address")
            .trim()
            .to_owned();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        std::thread::spawn(move || for _ in lines {});
        McpServer {
            child,
            sdk,
            url,
            port,
            count_file,
        }
    }

    /// Waits until the server process ended (it crashed on purpose), then
    /// starts it again on the same port and count file.
    pub(crate) fn restart_after_exit(mut self, dir: &Path) -> McpServer {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        McpServer::start_on(self.sdk, dir, self.port)
    }

    /// How many times tools ran for `marker` (lines `tool marker slot`), and
    /// with which slots.
    pub(crate) fn executions(&self, marker: &str) -> Vec<String> {
        executions(&self.count_file, marker)
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The executions recorded in `count_file` for `marker` (`tool slot` each).
pub(crate) fn executions(count_file: &Path, marker: &str) -> Vec<String> {
    std::fs::read_to_string(count_file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (tool, who, slot) = (words.next()?, words.next()?, words.next()?);
            (who == marker).then(|| format!("{tool} {slot}"))
        })
        .collect()
}

/// A gateway config in `dir`: redb store, fixed tenant, admin with
/// [`ADMIN_TOKEN`], and `note` keyed by its arguments within 2 s, plus `extra`.
pub(crate) fn gateway_config(dir: &Path, upstream: &str, extra: &str) -> PathBuf {
    let text = format!(
        r#"listen = "127.0.0.1:0"
upstream = "{upstream}"
admin = "127.0.0.1:0"
admin_token = "{ADMIN_TOKEN}"
call_timeout_ms = 20000

[store]
path = {store:?}

[tenant]
fixed = "clinic-a"

[[tools]]
name = "note"
effect = "local"
derive = "arguments"
derive_window_ms = 2000
{extra}
"#,
        store = dir.join("mcp.redb"),
    );
    let path = dir.join("mcp.toml");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// A running `idemkit mcp` over HTTP; killed when dropped.
pub(crate) struct Gateway {
    child: Child,
    /// The MCP endpoint clients connect to.
    pub(crate) url: String,
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
}

impl Gateway {
    pub(crate) fn start(config: &Path) -> Gateway {
        Gateway::start_with_env(config, &[])
    }

    /// Like [`Gateway::start`], with these environment variables set.
    pub(crate) fn start_with_env(config: &Path, env: &[(&str, &str)]) -> Gateway {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start idemkit mcp");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut admin = None;
        let url = loop {
            let line = lines
                .next()
                .expect("the gateway printed its address")
                .expect("read stdout");
            let url = line.rsplit(' ').next().unwrap_or_default().to_owned();
            if line.contains("admin on") {
                admin = Some(
                    url.trim_start_matches("http://")
                        .parse()
                        .expect("admin address"),
                );
            } else if line.contains("listening on") {
                break url;
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let addr = url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .split('/')
            .next()
            .and_then(|a| a.parse().ok())
            .expect("gateway address");
        Gateway {
            child,
            url,
            addr,
            admin: admin.expect("the admin address was printed first"),
        }
    }

    /// The gateway's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET path` on the admin listener, with the token.
    pub(crate) fn admin_get(&self, path: &str) -> Reply {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        request(
            self.admin,
            "GET",
            path,
            &[("Authorization", auth.as_bytes())],
            b"",
        )
        .expect("the admin listener answers")
    }

    /// The records the admin listener lists (`state` one of its filters, or all).
    pub(crate) fn records(&self, state: Option<&str>) -> Vec<Value> {
        let path = state.map_or_else(|| "/records".to_owned(), |s| format!("/records?state={s}"));
        let reply = self.admin_get(&path);
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()["records"].as_array().expect("records").clone()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `scenario` for `marker` through `client` against `url`; its JSON report.
pub(crate) fn run_client(client: ClientKind, url: &str, scenario: &str, marker: &str) -> Value {
    let mut command = match client {
        ClientKind::V1 | ClientKind::V2 => {
            let mut c = Command::new(node());
            c.arg(mcp_dir().join(if client == ClientKind::V1 {
                "client_v1.mjs"
            } else {
                "client_v2.mjs"
            }));
            c
        }
        ClientKind::Python => {
            let mut c = Command::new(python());
            c.arg(mcp_dir().join("client_py.py"));
            c
        }
    };
    let output = command
        .args([url, scenario, marker])
        .current_dir(mcp_dir())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the MCP client");
    assert!(
        output.status.success(),
        "{client:?} client, scenario {scenario}: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A gateway over stdio in front of the v2 server's stdio, driven line by line.
pub(crate) struct StdioGateway {
    child: Child,
    input: ChildStdin,
    output: std::io::Lines<BufReader<ChildStdout>>,
}

impl StdioGateway {
    /// `idemkit mcp --config CONFIG -- node server.mjs v2 stdio`, counting into `count_file`.
    pub(crate) fn start(config: &Path, count_file: &Path) -> StdioGateway {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .arg("mcp")
            .arg("--config")
            .arg(config)
            .arg("--")
            .arg(node())
            .arg(mcp_dir().join("server.mjs"))
            .args(["v2", "stdio"])
            .env("COUNT_FILE", count_file)
            .current_dir(mcp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start idemkit mcp over stdio");
        let input = child.stdin.take().expect("piped stdin");
        let output = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        StdioGateway {
            child,
            input,
            output,
        }
    }

    /// Sends `message` and returns the response to its id (notifications and
    /// server requests before it are skipped).
    pub(crate) fn request(&mut self, message: &Value) -> Value {
        writeln!(self.input, "{message}").expect("write to the gateway");
        self.input.flush().expect("flush");
        loop {
            let line = self
                .output
                .next()
                .expect("the gateway answered")
                .expect("read the gateway");
            let answer: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            if answer.get("id") == message.get("id") && answer.get("method").is_none() {
                return answer;
            }
        }
    }
}

impl Drop for StdioGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process whose first stdout line naming `http://` gives its MCP URL (the
/// last one on the line);
/// killed when dropped.
pub(crate) struct Spawned {
    child: Child,
    pub(crate) url: String,
}

impl Spawned {
    pub(crate) fn start(mut command: Command) -> Spawned {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the process");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("the process printed its address")
                .expect("read stdout");
            if let Some(at) = line.rfind("http://") {
                break line[at..]
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Spawned { child, url }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the MCP conformance suite's server scenarios against `url` (from `dir`,
/// where it writes its results); each scenario and whether all its checks passed.
pub(crate) fn conformance(url: &str, dir: &Path) -> Vec<(String, bool)> {
    let output = Command::new(node())
        .arg(mcp_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url])
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .expect("run the conformance suite");
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = text
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary in {text}"));
    summary
        .lines()
        .filter_map(|line| {
            let (name, counts) = line.trim().split_once(": ")?;
            let (mark, name) = name.split_once(' ')?;
            counts
                .contains("passed")
                .then(|| (name.to_owned(), mark == "✓"))
        })
        .collect()
}
