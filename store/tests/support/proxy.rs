//! A fault-injecting HTTP/1.1 proxy for end-to-end tests: it forwards each
//! request to the service on a fresh connection, records its `Idempotency-Key`,
//! and can swallow the response of the first N requests (the service did the
//! work; the client never hears of it), the way a flaky network or a load
//! balancer's idle timeout loses answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A running proxy; it stops accepting when the test process ends.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: SocketAddr,
    /// How many more responses are swallowed.
    drop_left: AtomicUsize,
    /// The `Idempotency-Key` of every request received, in order (`""` if none).
    keys: Mutex<Vec<String>>,
    /// What happened to each request, in order: `forwarded` or `dropped`.
    fates: Mutex<Vec<&'static str>>,
}

impl Proxy {
    /// A proxy in front of `upstream` that drops the first `drop_first` responses.
    pub(crate) fn start(upstream: SocketAddr, drop_first: usize) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            drop_left: AtomicUsize::new(drop_first),
            keys: Mutex::new(Vec::new()),
            fates: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let shared = Arc::clone(&accepting);
                thread::spawn(move || shared.relay(client));
            }
        });
        Proxy { addr, shared }
    }

    /// `http://ADDR/appointments` through this proxy.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/appointments", self.addr)
    }

    /// Every `Idempotency-Key` received so far, in order.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.shared.keys.lock().unwrap().clone()
    }

    /// What happened to each request so far: `forwarded` or `dropped`.
    pub(crate) fn fates(&self) -> Vec<&'static str> {
        self.shared.fates.lock().unwrap().clone()
    }
}

impl Shared {
    fn relay(&self, client: TcpStream) {
        let Some((head, key, body)) = read_request(&client) else {
            return;
        };
        self.keys.lock().unwrap().push(key);
        let Ok(mut upstream) = TcpStream::connect(self.upstream) else {
            return;
        };
        if upstream
            .write_all(head.as_bytes())
            .and_then(|()| upstream.write_all(&body))
            .is_err()
        {
            return;
        }
        // `Connection: close` was asked for: the response ends at EOF.
        let mut response = Vec::new();
        if upstream.read_to_end(&mut response).is_err() {
            return;
        }
        let drop_it = self
            .drop_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        self.fates
            .lock()
            .unwrap()
            .push(if drop_it { "dropped" } else { "forwarded" });
        if drop_it {
            // Closing without a byte of the response: the client sees the
            // connection reset or closed mid-request.
            let _ = client.shutdown(std::net::Shutdown::Both);
            return;
        }
        let mut client = client;
        let _ = client.write_all(&response);
    }
}

/// Reads one request; returns the head to forward (its `Connection` header
/// replaced by `Connection: close`), the `Idempotency-Key` value and the body.
fn read_request(client: &TcpStream) -> Option<(String, String, Vec<u8>)> {
    let mut reader = BufReader::new(client.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut head = request_line.clone();
    let mut key = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "connection" => continue,
            "idempotency-key" => key = value.trim().to_owned(),
            "content-length" => length = value.trim().parse().ok()?,
            _ => {}
        }
        head.push_str(&line);
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((head, key, body))
}
