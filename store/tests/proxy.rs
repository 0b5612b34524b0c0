//! The two gateways of the `idemkit` binary, `idemkit proxy` in front of an HTTP
//! upstream and `idemkit mcp` in front of an MCP server, as processes. One
//! binary: each file under tests/proxy is a module.

mod support;

mod proxy {
    mod access_log;
    mod in_front_of_an_upstream;
    mod listening_over_tls;
    mod mcp_gateway;
    mod mcp_sdk_end_to_end;
    mod operator_console;
    mod to_an_https_upstream;
    mod what_it_trusts;
}
