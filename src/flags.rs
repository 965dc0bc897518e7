//! Command-line value parsers shared by the flag sets of several modules (`diorch run`, leader
//! election, the HTTP listeners), in DI-orchestrator's and controller-runtime's formats.
//!
//! Owns parsing only; must not touch what the values configure.

use std::net::SocketAddr;

/// Go-style durations as DI-orchestrator takes them (`1m0s`, `30s`, `1h`).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("invalid duration {s:?} (e.g. 1m, 30s): {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("duration {s:?} must not be negative"))
}

/// An endpoint's address, or `None` when disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindAddress(pub Option<SocketAddr>);

/// Bind addresses as controller-runtime takes them: `:8080` for every interface, `host:port`,
/// or `0` to disable.
pub fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    if s == "0" {
        return Ok(BindAddress(None));
    }
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    full.parse()
        .map(|a| BindAddress(Some(a)))
        .map_err(|e| format!("invalid address {s:?} (e.g. :8080, 127.0.0.1:8080, 0): {e}"))
}
