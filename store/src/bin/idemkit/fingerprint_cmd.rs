//! `idemkit fingerprint [--operation OP] [--schema-version N] [--include PTR]...
//! [--exclude PTR]... [--content-type MIME] [--method M --path P [--query Q]
//! [--ignore-query | --ignore-query-param NAME...]] [FILE|-]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use idemkit::core::fingerprint::{ContentKind, FingerprintError, FingerprintSpec, RequestLine};

use crate::exit;
use crate::input::{error_line, read_input, write_stdout};

/// Print the fingerprint of a request (64 hex characters and a newline).
///
/// JSON bodies are canonicalized (strict RFC 8785) first, so member order,
/// whitespace, escapes and number spelling do not change the fingerprint.
/// With --method and --path the request line counts too (scheme 2, what the
/// middleware and the npm handler compute): the method, the concrete path and
/// the query's decoded pairs sorted by name. Without them only the operation
/// and the body count (scheme 1, what `idemkit exec` computes).
/// A rejected body prints one line on stderr and exits 65; a malformed
/// pointer exits 64; an unreadable file exits 66.
///
/// Examples:
///   echo '{"slot":"09:00","request_id":"r1"}' | idemkit fingerprint --operation appointments.create --exclude /request_id
///   echo '{"amount":10}' | idemkit fingerprint --operation accounts.withdraw --method POST --path /accounts/A/withdraw --query 'currency=EUR&utm_source=mail' --ignore-query-param utm_source
///   idemkit fingerprint --operation orders.create --include /items --include /customer/id order.json
///   printf 'a=1&b=2' | idemkit fingerprint --content-type application/x-www-form-urlencoded
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct FingerprintArgs {
    /// The operation (endpoint or action name), e.g. `appointments.create`.
    #[arg(long, default_value = "")]
    operation: String,
    /// The payload schema version.
    #[arg(long, default_value_t = 1)]
    schema_version: u32,
    /// Cover only this RFC 6901 JSON Pointer (repeatable).
    #[arg(long, value_name = "PTR")]
    include: Vec<String>,
    /// Leave out this RFC 6901 JSON Pointer (repeatable).
    #[arg(long, value_name = "PTR")]
    exclude: Vec<String>,
    /// The body's media type: JSON, form or anything else (raw bytes).
    #[arg(long, value_name = "MIME", default_value = "application/json")]
    content_type: String,
    /// The request's method, as sent (with --path: the request line counts).
    #[arg(long, value_name = "METHOD", requires = "path")]
    method: Option<String>,
    /// The request's concrete path, as sent (`/accounts/A/withdraw`).
    #[arg(long, value_name = "PATH", requires = "method")]
    path: Option<String>,
    /// The request's query, the text after `?` (a leading `?` is dropped).
    #[arg(long, value_name = "QUERY", requires = "path")]
    query: Option<String>,
    /// Leave the whole query out (the method and path still count).
    #[arg(long, requires = "path", conflicts_with = "ignore_query_param")]
    ignore_query: bool,
    /// Leave this query parameter out (repeatable).
    #[arg(long, value_name = "NAME", requires = "path")]
    ignore_query_param: Vec<String>,
    /// The body file; `-` or nothing reads standard input.
    file: Option<PathBuf>,
}

pub(crate) fn run(args: &FingerprintArgs) -> ExitCode {
    let mut spec = FingerprintSpec::new(ContentKind::from_mime(&args.content_type))
        .schema_version(args.schema_version);
    for p in &args.include {
        spec = match spec.include(p) {
            Ok(s) => s,
            Err(e) => return usage(&format!("--include {e} [{}]", e.code())),
        };
    }
    for p in &args.exclude {
        spec = match spec.exclude(p) {
            Ok(s) => s,
            Err(e) => return usage(&format!("--exclude {e} [{}]", e.code())),
        };
    }
    for name in &args.ignore_query_param {
        spec = spec.ignore_query_param(name);
    }
    if args.ignore_query {
        spec = spec.ignore_query();
    }
    let body = match read_input(args.file.as_deref()) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let fingerprint = match (&args.method, &args.path) {
        (Some(method), Some(path)) => {
            let query = args
                .query
                .as_deref()
                .map(|q| q.strip_prefix('?').unwrap_or(q));
            let line = RequestLine::new(method, path, query);
            spec.fingerprint_request(&args.operation, &line, &body)
                .map(|fp| fp.value())
        }
        _ => spec.fingerprint(&args.operation, &body),
    };
    match fingerprint {
        Ok(fp) => write_stdout(format!("{fp}\n").as_bytes()),
        Err(e @ FingerprintError::SelectionNeedsJson) => usage(&format!(
            "{e} (content type {:?}) [{}]",
            args.content_type,
            e.code()
        )),
        Err(e) => {
            error_line(&format!("rejected body: {e} [{}]", e.code()));
            ExitCode::from(exit::DATA_ERR)
        }
    }
}

fn usage(message: &str) -> ExitCode {
    error_line(message);
    ExitCode::from(exit::USAGE)
}
