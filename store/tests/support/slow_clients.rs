//! Clients that hold a connection without finishing a request: what the tests
//! of every listener's header-read deadline share.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A connection to `addr` whose reads wait 20 s, well past any deadline the
/// tests set: a read that returns sooner was ended by the server.
pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Reads `connection` to its end: the server closed it, silently or after a
/// 408, and answered nothing else. Returns how long the server took.
pub(crate) fn closed_by_the_server(mut connection: impl Read, what: &str) -> Duration {
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = connection.read_to_end(&mut rest);
    assert!(
        read.is_ok(),
        "{what}: the connection was left open ({read:?} after {:?})",
        started.elapsed()
    );
    assert!(
        rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"),
        "{what}: {}",
        String::from_utf8_lossy(&rest)
    );
    eprintln!("{what} was cut off {:?} after it began", started.elapsed());
    started.elapsed()
}

/// Reads one answer (status line, headers, a `Content-Length` body) from a
/// connection the server keeps alive, and returns its status line. The server
/// must not have announced that it closes the connection.
pub(crate) fn read_one_answer(reader: &mut impl BufRead) -> String {
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = Some(value.trim().parse::<usize>().unwrap());
        }
        assert!(
            !(line.to_ascii_lowercase().starts_with("connection:") && line.contains("close")),
            "the server closed the connection itself: {line}"
        );
    }
    let mut body = vec![0; length.expect("the answer has a Content-Length")];
    reader.read_exact(&mut body).unwrap();
    status
}

/// A connection to `addr` that sent `GET path`, got its 200 answer, and is kept
/// open by the server for a next request.
pub(crate) fn kept_alive_after(addr: SocketAddr, path: &str) -> BufReader<TcpStream> {
    let mut kept = connect(addr);
    write!(kept, "GET {path} HTTP/1.1\r\nHost: example\r\n\r\n").unwrap();
    let mut reader = BufReader::new(kept);
    let status = read_one_answer(&mut reader);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    reader
}
